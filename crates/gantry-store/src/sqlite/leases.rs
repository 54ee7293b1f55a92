//! Leases: what only one server process may do at a time, and the fencing tokens that keep a
//! deposed holder's late commits out.

use super::*;

impl SqliteStore {
    pub(super) async fn acquire_lease(
        &self,
        name: &str,
        holder: &str,
        ttl: Millis,
        now: Millis,
    ) -> Result<Option<i64>> {
        let mut tx = self.writer.begin().await?;
        let stored = sqlx::query_as::<_, (String, i64, i64)>(
            "SELECT holder, token, expires_at FROM leases WHERE name = ?",
        )
        .bind(name)
        .fetch_optional(&mut *tx)
        .await?;
        let token = match lease_step(name, stored, holder, now) {
            LeaseStep::Busy => return Ok(None),
            LeaseStep::Renew(token) => {
                sqlx::query("UPDATE leases SET expires_at = ? WHERE name = ?")
                    .bind(now + ttl)
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
                token
            }
            LeaseStep::Take { token, event } => {
                sqlx::query(
                    "INSERT INTO leases (name, holder, token, acquired_at, expires_at)
                     VALUES (?, ?, ?, ?, ?)
                     ON CONFLICT (name) DO UPDATE SET holder = excluded.holder,
                        token = excluded.token, acquired_at = excluded.acquired_at,
                        expires_at = excluded.expires_at",
                )
                .bind(name)
                .bind(holder)
                .bind(token)
                .bind(now)
                .bind(now + ttl)
                .execute(&mut *tx)
                .await?;
                plain_event(&mut tx, "lease.taken", event, now).await?;
                token
            }
        };
        tx.commit().await?;
        Ok(Some(token))
    }

    pub(super) async fn release_lease(&self, name: &str, holder: &str, now: Millis) -> Result<()> {
        let mut tx = self.writer.begin().await?;
        let n = sqlx::query(
            "UPDATE leases SET expires_at = ? WHERE name = ? AND holder = ? AND expires_at > ?",
        )
        .bind(now)
        .bind(name)
        .bind(holder)
        .bind(now)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n > 0 {
            let msg = format!("{holder} gave lease {name} up");
            plain_event(&mut tx, "lease.released", msg, now).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    pub(super) async fn lease(&self, name: &str) -> Result<Option<LeaseRow>> {
        let row = sqlx::query_as::<_, (String, String, i64, i64, i64)>(
            "SELECT name, holder, token, acquired_at, expires_at FROM leases WHERE name = ?",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        Ok(
            row.map(|(name, holder, token, acquired_at, expires_at)| LeaseRow {
                name,
                holder,
                token,
                acquired_at,
                expires_at,
            }),
        )
    }
}

/// [`Change::Fence`] inside an applying transaction: the lease's token as of this
/// transaction (the single writer's), so a holder deposed a moment ago is refused.
pub(super) async fn check_fence(tx: &mut Transaction<'_, Sqlite>, f: &Fence) -> Result<()> {
    let stored =
        sqlx::query_as::<_, (String, i64)>("SELECT holder, token FROM leases WHERE name = ?")
            .bind(&f.lease)
            .fetch_optional(&mut **tx)
            .await?;
    fence_holds(f, stored)
}
