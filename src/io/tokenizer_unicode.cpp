// The Unicode normalization forms of the tokenizers library's NFC, NFD, NFKC
// and NFKD normalizers, through ICU's Normalizer2 (the library itself uses
// the Rust unicode-normalization tables; both follow UAX #15).
#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/utypes.h>

#include "core/error.hpp"
#include "io/tokenizer_impl.hpp"

namespace cortiq::io::tok {

namespace {

// ICU owns the instances; they live until the process ends.
const icu::Normalizer2& instance(UnicodeForm form) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = nullptr;
    switch (form) {
        case UnicodeForm::nfc:
            n = icu::Normalizer2::getNFCInstance(status);
            break;
        case UnicodeForm::nfd:
            n = icu::Normalizer2::getNFDInstance(status);
            break;
        case UnicodeForm::nfkc:
            n = icu::Normalizer2::getNFKCInstance(status);
            break;
        case UnicodeForm::nfkd:
            n = icu::Normalizer2::getNFKDInstance(status);
            break;
    }
    CORTIQ_CHECK(U_SUCCESS(status) && n != nullptr,
                 "tokenizer: ICU has no {} normalizer ({}): is its data installed?",
                 unicode_form_name(form), u_errorName(status));
    return *n;
}

}  // namespace

const char* unicode_form_name(UnicodeForm form) {
    switch (form) {
        case UnicodeForm::nfc:
            return "NFC";
        case UnicodeForm::nfd:
            return "NFD";
        case UnicodeForm::nfkc:
            return "NFKC";
        case UnicodeForm::nfkd:
            return "NFKD";
    }
    return "?";
}

void unicode_form_check(UnicodeForm form) {
    (void)instance(form);
}

std::string unicode_normalize(std::string s, UnicodeForm form) {
    const icu::Normalizer2& n = instance(form);
    const icu::StringPiece in(s.data(), static_cast<int32_t>(s.size()));
    UErrorCode status = U_ZERO_ERROR;
    // Most text is already normalised: check first, so it needs no copy.
    if (n.isNormalizedUTF8(in, status) && U_SUCCESS(status)) return s;
    status = U_ZERO_ERROR;
    std::string out;
    out.reserve(s.size() + s.size() / 4);
    icu::StringByteSink<std::string> sink(&out);
    n.normalizeUTF8(0, in, sink, nullptr, status);
    CORTIQ_CHECK(U_SUCCESS(status), "tokenizer: {} normalization of {} bytes failed: {}",
                 unicode_form_name(form), s.size(), u_errorName(status));
    return out;
}

}  // namespace cortiq::io::tok
