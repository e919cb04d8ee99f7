# One table: a row per variant and concurrency, ratios against the dual write of the same c (the
# pipeline rows: against pipeline-by-hand with as many members).
# With -count N or BENCH_ROUNDS=N every figure is the median of the N rounds (the ratios are of
# the medians), so that one slow round does not make the table; then the lines "by round" give
# every round's own ratios and their median, which the goals are judged by.
#
# Input: the output of go test -bench of those benchmarks, any number of rounds appended.
/^Benchmark(Throughput|Pipeline)\// && $2 ~ /^[0-9]+$/ { # results (name, iterations, ...), not BENCH_PHASES reports
  split($1, parts, "/"); variant = parts[2]; c = parts[3]; sub(/-[0-9]+$/, "", c); sub(/^c=/, "", c)
  for (i = 3; i < NF; i += 2) { k = variant SUBSEP c SUBSEP $(i+1); n = ++cnt[k]; all[k, n] = $i }
  rounds[variant, c]++
  if (!(c in seen)) { seen[c] = 1; cs[++nc] = c }
  if (!(variant in vseen)) { vseen[variant] = 1; vs[++nv] = variant }
}
END {
  if (nc == 0) exit 0 # only BenchmarkRecovery ran: go test printed its figures above
  for (k in cnt) {
    n = cnt[k]
    for (i = 1; i <= n; i++) x[i] = all[k, i]
    for (i = 2; i <= n; i++) { t = x[i]; for (j = i - 1; j >= 1 && x[j] + 0 > t + 0; j--) x[j + 1] = x[j]; x[j + 1] = t }
    v[k] = (n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2)
  }
  most = 0
  for (k in rounds) if (rounds[k] > most) most = rounds[k]
  if (most > 1) printf "\n(each figure: the median of %d rounds)", most
  printf "\n%-22s %4s %9s %8s %8s %9s %8s %8s %10s %14s %12s %14s %9s %9s %9s %9s %7s %8s\n", "variant", "c", "txn/s", "p50 ms", "p99 ms", "x dual/s", "x p50", "x floor", "x sh floor", "coord ms/txn", "pg ms/txn", "kafka ms/txn", "shared %", "members", "sql sh %", "coord MB", "idle %", "steal %"
  for (j = 1; j <= nc; j++) for (k = 1; k <= nv; k++) {
    c = cs[j]; n = vs[k]
    if (!((n, c, "txn/s") in v)) continue
    ref = refOf(n)
    d = v[ref, c, "txn/s"]; dp = v[ref, c, "p50-ms"]; fp = v[floorOf(n), c, "p50-ms"]
    sf = (n ~ /^pipeline|-100x$/ ? 0 : v["inline-shared-logged", c, "txn/s"])
    printf "%-22s %4s %9.0f %8.2f %8.2f %9.2f %8.2f %8s %10s %14.3f %12.3f %14.3f %9s %9s %9s %9s %7s %8s\n", n, c, v[n, c, "txn/s"], v[n, c, "p50-ms"], v[n, c, "p99-ms"],
      (d > 0 ? v[n, c, "txn/s"] / d : 0), (dp > 0 ? v[n, c, "p50-ms"] / dp : 0),
      (fp > 0 && n !~ /^pipeline/ ? sprintf("%.2f", v[n, c, "p50-ms"] / fp) : "-"),
      (sf > 0 ? sprintf("%.2f", v[n, c, "txn/s"] / sf) : "-"),
      v[n, c, "cpu-coord-ms/txn"], v[n, c, "cpu-pg-ms/txn"], v[n, c, "cpu-kafka-ms/txn"],
      ((n, c, "shared-%") in v ? sprintf("%.0f", v[n, c, "shared-%"]) : "-"),
      ((n, c, "members/shared-txn") in v ? sprintf("%.1f", v[n, c, "members/shared-txn"]) : "-"),
      ((n, c, "sql-shared-%") in v ? sprintf("%.0f", v[n, c, "sql-shared-%"]) : "-"),
      ((n, c, "rss-MB") in v ? sprintf("%.0f", v[n, c, "rss-MB"]) : "-"),
      ((n, c, "host-idle-%") in v ? sprintf("%.0f", v[n, c, "host-idle-%"]) : "-"),
      ((n, c, "host-steal-%") in v ? sprintf("%.1f", v[n, c, "host-steal-%"]) : "-")
  }
  if (most > 1) {
    # The ratios of each round: a variant against its reference of the same round (the i-th
    # result of a variant is its round i), and the median of those, which the goals are judged
    # by; the median of the ratios by round need not be the ratio of the medians above.
    printf "\nby round: each ratio within one round, then the median of those ratios\n"
    for (j = 1; j <= nc; j++) for (k = 1; k <= nv; k++) {
      c = cs[j]; n = vs[k]
      ref = refOf(n); fl = floorOf(n)
      if (n != ref) byRound(n, c, "txn/s", ref, "txn/s over " ref)
      if (n != ref && n ~ /-100x$/) byRound(n, c, "p50-ms", ref, "p50 over " ref)
      if (n != fl && n !~ /^pipeline/) byRound(n, c, "p50-ms", fl, "p50 over " fl)
    }
  }
}
# refOf is the row variant n is measured against: the loop by hand with as many members for a
# pipeline row, the work by hand for a "-100x" row, else the dual write.
function refOf(n) {
  return (n ~ /^pipeline/ ? "pipeline-by-hand" : (n ~ /-100x$/ ? "by-hand-100x" : "dual-write"))
}
# floorOf is the protocol's floor for variant n's latency (its "x floor").
function floorOf(n) {
  return (n ~ /-100x$/ ? "inline-2pc-logged-100x" : "inline-2pc-logged")
}
# byRound prints the ratio of metric m of variant n to that of ref at concurrency c in every
# round both ran in equally often, and the median of those ratios.
function byRound(n, c, m, ref, label,    r, i, line, q, t, j, med) {
  r = cnt[n, c, m]
  if (r < 2 || cnt[ref, c, m] != r) return
  line = ""
  for (i = 1; i <= r; i++) {
    q[i] = (all[ref, c, m, i] > 0 ? all[n, c, m, i] / all[ref, c, m, i] : 0)
    line = line sprintf(" %.2f", q[i])
  }
  for (i = 2; i <= r; i++) { t = q[i]; for (j = i - 1; j >= 1 && q[j] > t; j--) q[j + 1] = q[j]; q[j + 1] = t }
  med = (r % 2 ? q[(r + 1) / 2] : (q[r / 2] + q[r / 2 + 1]) / 2)
  printf "%-22s %4s  %-34s%s   median %.2f\n", n, c, label ":", line, med
}
