#!/usr/bin/python3
"""Golden data for the tokenizer's Unicode normalizers (NFC, NFD, NFKC, NFKD):
each string in the four forms of Python's unicodedata.normalize, an
implementation independent of the ICU that cortiq uses.

    /usr/bin/python3 scripts/golden/make_unicode_forms.py tests/golden/unicode_forms.json

The strings use characters assigned before Unicode 4.1, whose forms Unicode's
normalization stability policy fixes: any later Unicode version of Python or
ICU gives the same forms. The file is ASCII (JSON escapes), so that no editor
normalizes it.
"""
import json
import sys
import unicodedata

TEXTS = [
    # full-width letters, digits and punctuation; half-width katakana
    "ＡＢＣ ｄｅｆ １２３！？",
    "ｈｅｌｌｏ，ｗｏｒｌｄ",
    "ｶﾀｶﾅ ｶﾞｷﾞ ﾊﾟ",
    "\u3000全角\u3000スペース",
    # ligatures and digraphs
    "ﬁle ﬂow ﬀ ﬃ ﬄ ﬅ ﬆ",
    "Ǆ ǅ ǆ Ĳ ĳ ŉ",
    # combining marks, composed and not, out of canonical order
    "e\u0301 é a\u0308 ä A\u030a Å",
    "a\u0323\u0302 a\u0302\u0323 ậ",
    "o\u0308\u0304 ȫ q\u0307\u0323",
    "Tie\u0302\u0301ng Vie\u0323\u0302t / Tiếng Việt",
    # singletons and composition exclusions
    "\u212b \u2126 \u212a \u1f71 \u037e \u0387",
    "\u0958 \u0915\u093c \u2adc",
    # Hangul: conjoining jamo and precomposed syllables
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab\u1100\u1173\u11af",
    "각 한글 \u3131\u314f",
    # compatibility characters
    "① ② ⑩ ㎏ ㎞ ㏄ x² H₂O ½ ¾",
    "™ … ‥ ſ \u00a0NBSP\u2002EN Ⅳ ⅻ ㍿ ℌ ℃",
    "\U0001d400\U0001d41b\U0001d7ce \u2460\u24b6",
    # Greek and Cyrillic with accents
    "ά α\u0301 ΐ ι\u0308\u0301 ῷ ω\u0342\u0345",
    "Ἀθῆναι Ἀ\u0301",
    "й и\u0306 ё е\u0308 Ѐ Е\u0300 ї і\u0308",
    "Привет, мир! Ёлка",
    # plain text, and the empty string
    "The quick brown fox.",
    "",
]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_unicode_forms.py OUT.json")
    cases = [{"text": t, **{f: unicodedata.normalize(f, t) for f in ("NFC", "NFD", "NFKC", "NFKD")}}
             for t in TEXTS]
    out = {"generator": f"Python {sys.version.split()[0]} unicodedata {unicodedata.unidata_version}",
           "cases": cases}
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
