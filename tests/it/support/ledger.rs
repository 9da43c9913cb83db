//! The ledger invariants every test that admits work can check.

use sqlx::PgPool;

/// The ledger invariants: every card's `reserved_mib` equals the sum of its live reservations and
/// stays within its size; an exclusive card holds nothing else; no job was admitted twice (but
/// once more after each time it was requeued from a lost node) or holds
/// a number of live cards other than it asked for. Returns the violations found.
pub async fn ledger_violations(pool: &PgPool) -> Vec<String> {
    let mut bad: Vec<String> = sqlx::query_scalar(
        "SELECT format('card %s: reserved_mib %s but live reservations sum to %s (total %s)', \
                       g.uuid, g.reserved_mib, coalesce(s.sum, 0), g.total_mib) \
         FROM gpus g LEFT JOIN (SELECT gpu_uuid, sum(vram_mib) AS sum FROM reservations \
                                WHERE released_at IS NULL GROUP BY gpu_uuid) s ON s.gpu_uuid = g.uuid \
         WHERE g.reserved_mib <> coalesce(s.sum, 0) OR coalesce(s.sum, 0) > g.total_mib",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    bad.extend(
        sqlx::query_scalar::<_, String>(
            "SELECT format('card %s: exclusive job shares it with %s other reservation(s)', gpu_uuid, count(*) - 1) \
             FROM reservations WHERE released_at IS NULL GROUP BY gpu_uuid \
             HAVING bool_or(exclusive) AND count(*) > 1",
        )
        .fetch_all(pool)
        .await
        .unwrap(),
    );
    bad.extend(
        sqlx::query_scalar::<_, String>(
            "SELECT format('job %s admitted %s times, requeued %s times', job_id, \
                           count(*) FILTER (WHERE kind = 'admitted'), \
                           count(*) FILTER (WHERE kind = 'requeued')) FROM job_events \
             WHERE kind IN ('admitted', 'requeued') GROUP BY job_id \
             HAVING count(*) FILTER (WHERE kind = 'admitted') \
                  > 1 + count(*) FILTER (WHERE kind = 'requeued')",
        )
        .fetch_all(pool)
        .await
        .unwrap(),
    );
    bad.extend(
        sqlx::query_scalar::<_, String>(
            "SELECT format('job %s (%s) holds %s live cards, asked for %s', j.id, j.status, \
                           count(r.id), j.gpu_count) \
             FROM jobs j LEFT JOIN reservations r ON r.job_id = j.id AND r.released_at IS NULL \
             GROUP BY j.id \
             HAVING (j.status IN ('admitted', 'starting', 'running') AND count(r.id) <> j.gpu_count) \
                 OR (j.released_at IS NOT NULL AND count(r.id) > 0) \
                 OR (j.status = 'queued' AND count(r.id) > 0)",
        )
        .fetch_all(pool)
        .await
        .unwrap(),
    );
    bad
}
