#!/usr/bin/env python3
"""Build a calibration text that samples a model's training mix.

    make_calib_mix.py OUT.txt --source NAME=FILE [--source ...] [--kb-per-source 100]

Each source is cut into documents of about 2 kB (whole paragraphs), documents
are taken evenly spread over the source until it contributes --kb-per-source
kilobytes, and the sources are interleaved round-robin, one document at a
time. `cortiq quantize --calib` cuts its windows evenly over the file, so every
window run and the held-out windows see every source in the same proportion.

Why: the encoder fits every tensor to the Grams of its calibration text; a
model trained on a mix of domains and calibrated on one of them loses most on
the others (docs/results.md, "calibration text"). The texts come from the
Debian packages that scripts/calib/fetch_calib_sources.sh unpacks.
"""
import argparse
import re
import sys


def documents(text, size=2000):
    paragraphs = [p.strip() for p in re.split(r'\n\s*\n', text) if p.strip()]
    docs, cur = [], []
    for p in paragraphs:
        cur.append(p)
        if sum(len(c) for c in cur) >= size:
            docs.append('\n\n'.join(cur))
            cur = []
    if cur:
        docs.append('\n\n'.join(cur))
    return docs


def pick(docs, budget):
    """Documents evenly spread over the source, about `budget` characters."""
    total = sum(len(d) for d in docs)
    if total <= budget:
        return docs
    k = max(1, round(len(docs) * budget / total))
    step = len(docs) / k
    return [docs[int(i * step)] for i in range(k)]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('out')
    ap.add_argument('--source', action='append', required=True, help='NAME=FILE')
    ap.add_argument('--kb-per-source', type=float, default=100.0)
    a = ap.parse_args()
    picked = []
    for s in a.source:
        name, _, path = s.partition('=')
        if not path:
            sys.exit(f'make_calib_mix: --source wants NAME=FILE, got {s!r}')
        docs = pick(documents(open(path, encoding='utf-8').read()), int(a.kb_per_source * 1000))
        print(f'{name}: {len(docs)} documents, {sum(len(d) for d in docs)} chars from {path}', file=sys.stderr)
        picked.append(docs)
    out = []
    for i in range(max(len(p) for p in picked)):
        out += [p[i] for p in picked if i < len(p)]
    tmp = a.out + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write('\n\n'.join(out) + '\n')
    import os
    os.replace(tmp, a.out)
    print(f'{a.out}: {len(out)} documents, {os.path.getsize(a.out)} bytes', file=sys.stderr)


if __name__ == '__main__':
    main()
