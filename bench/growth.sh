#!/usr/bin/env bash
# What a store's retained environments cost every invocation: 'hostfork
# run -- /bin/true' and 'hostfork ps' (no live command: an empty listing)
# against 'hostfork version', interleaved, on one store grown in steps to
# 300, 1,000, 3,000 and 10,000 retained runs (hfbench seed: Host.Run of
# 'true', the records 'hostfork run -- true' leaves). Retention keeps
# evidence 7 days by default, so a busy agent host reaches these sizes.
#
# usage: bench/growth.sh [ROUNDS [SIZES...]]   (default 30; 1 300 1000 3000 10000)
source "$(dirname "$0")/lib.sh"
rounds=${1:-30}
shift || true
sizes=("$@")
[ ${#sizes[@]} = 0 ] && sizes=(1 300 1000 3000 10000)
build_hostfork
"$hf" run -- /bin/true
header "per-invocation cost against retained runs: $rounds rounds per size"
have=1
for n in "${sizes[@]}"; do
	[ "$n" -gt "$have" ] && "$hfb" seed -root "$store" -n $((n - have)) >/dev/null && have=$n
	"$hfb" ab -rounds "$rounds" -warmup 2 -ref 'hostfork version' -json "$out/growth-$n.json" \
		-title "store with $("$hf" envs --all -q | wc -l) retained environments" \
		"hostfork run=$hf run -- /bin/true" \
		"hostfork ps=$hf ps" \
		"hostfork version=$hf version"
	have=$("$hf" envs --all -q | wc -l)
done | tee "$out/growth.md"
