#!/usr/bin/env python3
"""Jane Austen's novels out of the R package janeaustenr, without R.

    unpack_janeaustenr.py Rdata.rdb OUT.txt

An R lazy-load database (.rdb) is a run of records, each a 4-byte big-endian
length and a zlib stream holding one object in R's XDR serialisation. The
novels are character vectors (STRSXP, type 16) of lines; we read those and
write every novel except Emma (whose tail is a held-out text).
"""
import struct
import sys
import zlib


def records(data):
    pos = 0
    while pos < len(data):
        z = zlib.decompressobj()
        raw = z.decompress(data[pos + 4:])
        pos += 4 + len(data) - pos - 4 - len(z.unused_data)
        yield raw


def character_vector(b):
    """The lines of a serialised STRSXP, or None for any other object."""
    if b[:2] != b'X\n':
        raise ValueError('not an XDR-serialised R object')
    version = struct.unpack('>i', b[2:6])[0]
    p = 14  # format version, writer version, minimal reader version
    if version == 3:  # native encoding name
        p += 4 + struct.unpack('>i', b[p:p + 4])[0]
    flags = struct.unpack('>i', b[p:p + 4])[0]
    p += 4
    if flags & 0xFF != 16:
        return None
    n = struct.unpack('>i', b[p:p + 4])[0]
    p += 4
    lines = []
    for _ in range(n):
        _, length = struct.unpack('>ii', b[p:p + 8])
        p += 8
        if length < 0:  # NA_STRING
            lines.append('')
            continue
        lines.append(b[p:p + length].decode('utf-8'))
        p += length
    return lines


def main():
    rdb, out = sys.argv[1], sys.argv[2]
    novels = []
    for raw in records(open(rdb, 'rb').read()):
        lines = character_vector(raw)
        if not lines or len(lines) < 1000:
            continue
        title = next(x for x in lines if x.strip()).strip()
        if title.upper() == 'EMMA':
            continue
        novels.append((title, '\n'.join(lines)))
    if len(novels) != 5:
        sys.exit(f'unpack_janeaustenr: expected 5 novels besides Emma, found {[t for t, _ in novels]}')
    with open(out, 'w', encoding='utf-8') as f:
        f.write('\n\n'.join(text for _, text in novels) + '\n')
    print(f'{out}: {", ".join(t for t, _ in novels)}', file=sys.stderr)


if __name__ == '__main__':
    main()
