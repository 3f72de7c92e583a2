//! The renew_many section's tables in the summary.

use super::*;

pub(super) fn verdict(ok: bool) -> &'static str {
    if ok { "**met**" } else { "**missed**" }
}

pub fn markdown(w: &mut String, r: &RenewManyResult) {
    use std::fmt::Write as _;
    let _ = writeln!(
        w,
        "## Renewing many leases (pg_lease {}; one owner, ttl {} s, synchronous_commit=off; {} interleaved rounds of {:.1} s per variant and size)\n",
        r.version, r.ttl_seconds, r.rounds, r.round_seconds
    );
    for (n, what) in &r.variants {
        let _ = writeln!(w, "- `{n}`: {what}");
    }
    let _ = writeln!(
        w,
        "\nrenewals/s and the backend's CPU (utime + stime of pg_backend_pid(), from /proc) per renewed key; median (min–max) of the rounds; ratios per round.\n"
    );
    let _ = writeln!(
        w,
        "| held keys | variant | renewals/s | backend CPU / key | server CPU / key (all processes) | pass p50 / p99 |\n| --- | --- | --- | --- | --- | --- |"
    );
    for p in &r.points {
        for v in &p.variants {
            let _ = writeln!(
                w,
                "| {} | {} | {:.0} ({:.0}–{:.0}) | {:.2} µs ({:.2}–{:.2}) | {:.2} µs | {} / {} µs |",
                p.keys,
                v.name,
                v.renewals_per_s.median,
                v.renewals_per_s.min,
                v.renewals_per_s.max,
                v.backend_cpu_us.median,
                v.backend_cpu_us.min,
                v.backend_cpu_us.max,
                v.server_cpu_us.median,
                v.pass.p50_us,
                v.pass.p99_us
            );
        }
    }
    let _ = writeln!(
        w,
        "\n| held keys | renew-many / per-key, renewals/s | renew-many / bare, backend CPU per key | per-key / bare, backend CPU per key | renew-many / bare, server CPU per key |\n| --- | --- | --- | --- | --- |"
    );
    for p in &r.points {
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} |",
            p.keys,
            p.rate_many_over_per_key.ratio_text(),
            p.cpu_many_over_bare.ratio_text(),
            p.cpu_per_key_over_bare.ratio_text(),
            p.server_cpu_many_over_bare.ratio_text()
        );
    }
    if let Some(p) = r.points.iter().find(|p| p.keys == 10_000) {
        let _ = writeln!(
            w,
            "\nTargets at 10 000 keys: renewals/s ≥ {TARGET_RATE}× per-key: {:.2}× — {}; CPU per key ≤ {TARGET_CPU}× bare: {:.2}× — {}.\n",
            p.rate_many_over_per_key.median,
            verdict(p.rate_many_over_per_key.median >= TARGET_RATE),
            p.cpu_many_over_bare.median,
            verdict(p.cpu_many_over_bare.median <= TARGET_CPU)
        );
    }
    let _ = writeln!(
        w,
        "Plans of the bare UPDATE (EXPLAIN with the section's arrays; its prepared statement ran {}):\n",
        r.bare_generic_custom.map_or("–".into(), |(g, c)| format!(
            "{g} generic and {c} custom plans"
        ))
    );
    for (n, plan) in &r.bare_plans {
        let _ = writeln!(w, "{n} keys:\n\n```\n{plan}\n```\n");
    }
    if let Some(s) = &r.single {
        let _ = writeln!(
            w,
            "### Single calls, pg_lease {} vs {} (own databases, one connection each, cycle by cycle interleaved; {} rounds of {} s)\n",
            s.versions[0].version, s.versions[1].version, s.rounds, s.round_seconds
        );
        let _ = writeln!(
            w,
            "| version | acquire p50 / p99 | renew p50 / p99 | release p50 / p99 | backend CPU / cycle |\n| --- | --- | --- | --- | --- |"
        );
        for v in &s.versions {
            let _ = writeln!(
                w,
                "| {} | {} / {} µs | {} / {} µs | {} / {} µs | {:.1} µs ({:.1}–{:.1}) |",
                v.version,
                v.acquire.p50_us,
                v.acquire.p99_us,
                v.renew.p50_us,
                v.renew.p99_us,
                v.release.p50_us,
                v.release.p99_us,
                v.backend_cpu_us_per_cycle.median,
                v.backend_cpu_us_per_cycle.min,
                v.backend_cpu_us_per_cycle.max
            );
        }
        let _ = writeln!(
            w,
            "\n{} / {} per round: acquire mean {}, renew mean {}, release mean {}, backend CPU per cycle {}.\n",
            s.versions[0].version,
            s.versions[1].version,
            s.acquire_ratio.ratio_text(),
            s.renew_ratio.ratio_text(),
            s.release_ratio.ratio_text(),
            s.cpu_ratio.ratio_text()
        );
    }
}
