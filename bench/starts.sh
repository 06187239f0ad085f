#!/usr/bin/env bash
# Issue 11: the floor under every hostfork call — what starting a process
# costs on this machine, by kind of program, interleaved sample by sample
# (bench/hfbench ab; each sample is hfbench's fork, exec and wait):
#   /bin/true                      a dynamically linked C program (glibc)
#   C true, static glibc           the same without the dynamic loader
#   C true, no libc                _start makes exit(0): the kernel's share
#   Go, no cgo                     an empty Go program, statically linked
#   Go with cgo                    an empty Go program linked with glibc,
#                                  as the CLI is (SQLite)
#   hostfork version               the CLI: every package initialiser
#   hostfork guardian mode         the guardian's start: hostfork exec'd in
#                                  guardian mode, which finds no gate on
#                                  descriptor 3 and exits
#   bwrap                          the peer, for scale
# A run starts three of these (the CLI, its guardian, the workload);
# bwrap's run starts two (bwrap and the workload).
#
# With perf installed it then samples 300 starts each of /bin/true and of
# the guardian mode and reports the CPU that glibc's start spends probing
# the CPU (init_cpu_features, and the cache sizes through handle_amd or
# handle_intel): each CPUID instruction exits to the hypervisor in a VM.
#
# usage: bench/starts.sh [ROUNDS]   (default 300)
source "$(dirname "$0")/lib.sh"
need gcc go bwrap
rounds=${1:-300}
build_hostfork
src="$work/starts"
mkdir -p "$src/gohello" "$src/gocgo"
printf 'int main(void) { return 0; }\n' >"$src/true.c"
printf 'void _start(void) { __asm__ volatile("mov $60, %%eax; xor %%edi, %%edi; syscall"); }\n' >"$src/nolibc.c"
gcc -O2 -o "$src/true-dynamic" "$src/true.c"
gcc -O2 -static -o "$src/true-static" "$src/true.c"
gcc -O2 -static -nostdlib -o "$src/true-nolibc" "$src/nolibc.c"
printf 'module hello\n\ngo 1.26\n' | tee "$src/gohello/go.mod" >"$src/gocgo/go.mod"
printf 'package main\n\nfunc main() {}\n' >"$src/gohello/main.go"
printf 'package main\n\n// int one(void) { return 1; }\nimport "C"\n\nfunc main() { _ = C.one() }\n' >"$src/gocgo/main.go"
(cd "$src/gohello" && CGO_ENABLED=0 go build -o "$src/go-static" .)
(cd "$src/gocgo" && go build -o "$src/go-cgo" .)
# Fresh linker output sits in the page cache in large folios, which a
# fault maps whole (docs/benchmarks.md, thirteenth session): copy every
# binary so that all are read back alike.
for b in true-dynamic true-static true-nolibc go-static go-cgo; do
	cp "$src/$b" "$src/$b.tmp" && mv "$src/$b.tmp" "$src/$b"
done
header "process starts: $rounds interleaved rounds"
"$hfb" ab -rounds "$rounds" -warmup 10 -ref /bin/true -json "$out/starts.json" \
	-title "the start of a process, by kind (each sample: fork, exec, wait)" \
	"/bin/true=/bin/true" \
	"C true, static glibc=$src/true-static" \
	"C true, no libc=$src/true-nolibc" \
	"Go, no cgo=$src/go-static" \
	"Go with cgo=$src/go-cgo" \
	"hostfork version=$hf version" \
	"hostfork guardian mode=$hf __hostfork_guardian" \
	"bwrap=bwrap --bind / / --dev /dev --proc /proc /bin/true" | tee "$out/starts.md"

command -v perf >/dev/null || { echo "(perf not installed: no CPUID share)"; exit 0; }
echo
echo "CPU spent in glibc's CPU probe at start (perf, 300 starts each, sampled at 20 kHz):"
for what in "/bin/true" "$hf __hostfork_guardian"; do
	perf record -q -F 20000 -o "$work/cpuid.data" -- sh -c "for i in \$(seq 300); do $what </dev/null; done" >/dev/null 2>&1
	perf script -i "$work/cpuid.data" -F comm,ip,sym 2>/dev/null | python3 -c '
import sys
probe = ("init_cpu_features", "get_common_indices", "update_active", "handle_amd", "handle_intel", "intel_check_word", "dl_init_cacheinfo")
total = hits = 0
for line in sys.stdin:
    f = line.split()
    if len(f) < 2 or f[0] in ("sh", "seq"):
        continue
    total += 1
    if len(f) > 2 and any(p in f[2] for p in probe):
        hits += 1
# 20 kHz: one sample is 50 us.
print("  %-40s %.3f ms a start of %.3f ms sampled (%.0f %%)" % (sys.argv[1], hits * 0.05 / 300, total * 0.05 / 300, 100.0 * hits / max(total, 1)))
' "$what"
done
