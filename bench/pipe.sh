#!/usr/bin/env bash
# Issue 11 (f): 1 GiB through 'hostfork run --output pipe' (the default in
# the foreground: the guardian writes the stdout file and forwards to
# hostfork, whose stdout is /dev/null here) against
#   sh -c 'head -c 1G /dev/zero | tee FILE | cat > /dev/null'
# (the same topology from coreutils: a file and a forward), FILE on the
# store's filesystem. Also --output files against 'head -c 1G /dev/zero
# >> FILE' (the same topology: the workload writes its file itself) and
# 'head | cat > FILE' (two processes and a pipe, which on two cores
# pipelines the read and the write).
# Throughput = 1 GiB / median wall. VmHWM is the peak RSS of the hostfork
# process itself (polled from /proc/PID/status while it runs; for the sh
# peers it is sh's and means nothing). Output files are deleted before
# every sample (untimed). Interleaved sample by sample.
#
# usage: bench/pipe.sh [ROUNDS]   (default 10)
source "$(dirname "$0")/lib.sh"
need python3
rounds=${1:-10}
build_hostfork
"$hf" run -- /bin/true
header "pipe mode, 1 GiB: $rounds interleaved rounds"
clean="sh -c 'rm -f $work/tee.out $work/cat.out; find $store/runs -name stdout -size +1M -delete'"
"$hfb" ab -rounds "$rounds" -warmup 1 -hwm -bytes 1073741824 -ref 'tee FILE | cat' -json "$out/pipe.json" \
	-title "1 GiB of output: pipe mode, files mode, tee | cat, cat > file (all files on $(df --output=fstype "$work" | tail -1))" \
	-prepare "hostfork run --output pipe=$clean" -prepare "hostfork run --output files=$clean" \
	-prepare "tee FILE | cat=$clean" -prepare "cat > FILE=$clean" -prepare "head >> FILE=$clean" \
	"hostfork run --output pipe=$hf run --output pipe -- head -c 1G /dev/zero" \
	"hostfork run --output files=$hf run --output files -- head -c 1G /dev/zero" \
	"cat > FILE=sh -c 'head -c 1G /dev/zero | cat > $work/cat.out'" \
	"head >> FILE=sh -c 'exec head -c 1G /dev/zero >> $work/cat.out'" \
	"tee FILE | cat=sh -c 'head -c 1G /dev/zero | tee $work/tee.out | cat > /dev/null'" | tee "$out/pipe.md"
sh -c "rm -f $work/tee.out $work/cat.out; find $store/runs -name stdout -size +1M -delete"
