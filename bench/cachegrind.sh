# Sourced by bench/instr.sh and bench/icache.sh: the cache model their counts use, and
# reading cachegrind's totals.
#
# cg_sim: cachegrind's flags for a 32 KiB 8-way L1i and L1d with 64-byte lines (Zen 3's,
# and most x86 cores') and a 512 KiB L2 as its last level.
cg_sim=(--cache-sim=yes --I1=32768,8,64 --D1=32768,8,64 --LL=524288,8,64)

# cg_total FILE NAME: the total NAME ("I   refs", "I1  misses", "D1  misses") from
# cachegrind's summary on stderr, saved in FILE, without its commas.
cg_total() { awk -v k="$2" 'index($0, k) { v = $4; gsub(",", "", v); print v; exit }' "$1"; }
