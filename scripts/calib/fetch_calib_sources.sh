#!/usr/bin/env bash
# Unpack public-domain calibration sources from Debian packages into DIR
# (nothing is installed; the packages are downloaded and unpacked there):
#   DIR/austen.txt  Persuasion, Pride and Prejudice, Sense and Sensibility,
#                   Mansfield Park, Northanger Abbey (r-cran-janeaustenr;
#                   Emma is left out: the tail of Emma is a held-out text)
#   DIR/kjv.txt     the King James Bible, Genesis 1 to Acts 3 (bible-kjv,
#                   bible-kjv-text; Acts 4 onwards is a held-out text)
#   DIR/jargon.txt  the Jargon File 4.4.7 (jargon-text)
# These are the public-domain parts of the 6M test models' training mix
# (../shared/data/README.md), never their held-out tails.
#   fetch_calib_sources.sh DIR
set -euo pipefail
dir=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$dir/deb"
cd "$dir/deb"
if ! apt-get download bible-kjv bible-kjv-text jargon-text r-cran-janeaustenr >/dev/null 2>&1; then
  apt-get update -qq && apt-get download bible-kjv bible-kjv-text jargon-text r-cran-janeaustenr >/dev/null
fi
rm -rf root && mkdir root
for f in *.deb; do dpkg -x "$f" root; done
cd ..
# The bible program prints verses with their numbers; strip them.
deb/root/usr/bin/bible -p deb/root/usr/lib -l 75 "gen1:1-act3:26" |
  sed -E 's/^ +[0-9]+ //' >kjv.txt.tmp
grep -q "^Acts 3$" kjv.txt.tmp || { echo "fetch_calib_sources: Acts 3 missing from the KJV text" >&2; exit 1; }
if grep -q "^Acts 4$" kjv.txt.tmp; then echo "fetch_calib_sources: the KJV text reaches the held-out Acts 4" >&2; exit 1; fi
mv kjv.txt.tmp kjv.txt
zcat deb/root/usr/share/doc/jargon-text/jargon.txt.gz >jargon.txt
python3 "$here/unpack_janeaustenr.py" deb/root/usr/lib/R/site-library/janeaustenr/data/Rdata.rdb austen.txt
wc -c austen.txt kjv.txt jargon.txt >&2
