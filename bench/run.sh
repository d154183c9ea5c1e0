#!/usr/bin/env bash
# One command: installs what stoker needs (the packages scripts/test.sh
# installs), builds into build/, makes or reuses the datasets under
# bench/data/, runs the benchmark and writes bench/RESULTS.md and
# bench/results.png (bench/bench.py: stoker vs DataLoader), then
# bench/SCALE.md (bench/scale.py: indexing a million entries, cold reads and
# readahead), then bench/FORMATS.md (bench/formats.py: PNG and WebP
# ImageFolders, each decoder's cost), then bench/AUTOTUNE.md
# (bench/autotune.py: --workers auto against each fixed count), then
# bench/DETECTION.md (bench/detection.py: the segmentation and SSD recipes
# against DataLoader with torchvision's reference transforms), then
# bench/MULTIVIEW.md (bench/multiview.py: SimCLR's two views and DINO's ten
# against DataLoader with the same transform objects). Options go to
# bench/bench.py; --quick makes all six a smoke run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/lib.sh
stoker_ensure_packages
echo "==> building into build/"
stoker_build build
/usr/bin/python3 bench/bench.py --build build "$@"
quick=()
for a in "$@"; do [[ $a == --quick ]] && quick=(--quick); done
/usr/bin/python3 bench/scale.py --build build "${quick[@]}"
/usr/bin/python3 bench/formats.py --build build "${quick[@]}"
/usr/bin/python3 bench/autotune.py --build build "${quick[@]}"
/usr/bin/python3 bench/detection.py --build build "${quick[@]}"
/usr/bin/python3 bench/multiview.py --build build "${quick[@]}"
