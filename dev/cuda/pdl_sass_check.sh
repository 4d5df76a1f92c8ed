#!/bin/bash
# dev/cuda/pdl_sass_check.sh OBJ... — for every kernel in the CUDA objects that waits on its
# programmatic-launch predecessor (griddepcontrol.wait = SASS ACQBULK), the global loads
# the compiler placed before the first wait. Loads of data the previous kernel writes must
# not be among them (common.cuh, PDL rules): ptxas moves loads through `const __restrict__`
# pointers (LDG.*.CONSTANT) freely, also above the wait (the dense attention's queries,
# bench/RESULTS.md, att11). Review the list against each kernel's pre-wait reads.
# CUOBJDUMP: cuobjdump to use (default: the one on PATH).
set -eu
CO=${CUOBJDUMP:-cuobjdump}
for obj in "$@"; do
  "$CO" -sass "$obj" | awk -v obj="$obj" '
    /Function :/ { fn = $3; seen = 0; n = 0; delete l }
    /LDG/ && !/LDGSTS/ && !/LDGDEPBAR/ && !seen { l[n++] = $0 }
    /ACQBULK/ && !seen {
      seen = 1
      printf "%s %s: %d loads before the first wait\n", obj, fn, n
      for (i = 0; i < n; i++) { s = l[i]; sub(/^ +/, "", s); sub(/ *\/\* 0x[0-9a-f]+ \*\/ *$/, "", s); print "    " s }
    }'
done
