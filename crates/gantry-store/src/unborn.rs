//! A big task array stored as a range, not as rows. A submit stores the first
//! [`BORN_AHEAD`] members of an array as task rows and the rest as one `unborn_tasks` row per
//! job: the next index without a row and the last. Those are counted in `task_counts` with
//! the others (as PENDING, or as what ended them), so every count reads the same as if each
//! had its row. Each placement of a job's task gives the next one its row (it is *born*), so
//! the controller's window always finds rows to list; a stop or a failed dependency ends the
//! range as a whole. A million-task array costs a submit one row and a few counts.
//!
//! What both backends share is here: the ids of tasks not yet born (derived from their
//! position, so a page of `describe` can name a task before it has a row, and its row gets
//! that same id), and a page's rows merged with the ranges'. The SQL is each backend's.

use gantry_api::TaskStatus;
use uuid::Uuid;

use crate::rows::{parse, uuid, Cols};
use crate::*;

/// How many members of a task array a submit stores as rows; past this, a range. At least
/// the controller's widest window, so a tick never lists fewer waiting tasks than it could
/// place.
pub const BORN_AHEAD: usize = 1024;

/// The members of a task array a submit does not store as rows: `job`'s indexes
/// `first..=last`, each a PENDING task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewUnborn {
    pub job: String,
    /// The job's place in the workflow (its tasks' `ord`).
    pub ord: u32,
    pub first: u32,
    pub last: u32,
}

impl NewUnborn {
    pub fn count(&self) -> u64 {
        u64::from(self.last) - u64::from(self.first) + 1
    }
}

/// The id a task array's member gets when it is born, and is shown with before: the
/// workflow's first 60 bits, then the job's place and the index (a version-8 UUID, so it
/// never equals a random version-4 one).
pub fn unborn_task_id(workflow: Uuid, ord: u32, index: u32) -> Uuid {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&workflow.as_bytes()[..8]);
    b[8..12].copy_from_slice(&ord.to_be_bytes());
    b[12..].copy_from_slice(&index.to_be_bytes());
    Uuid::new_v8(b)
}

/// The (ord, index) of `id` if it is one of `workflow`'s [`unborn_task_id`]s.
pub(crate) fn unborn_position(workflow: Uuid, id: Uuid) -> Option<(u32, u32)> {
    if id.get_version_num() != 8 {
        return None;
    }
    let (b, w) = (id.as_bytes(), workflow.as_bytes());
    // Byte 6's high half is the version, byte 8's top two bits the variant.
    let same = b[..6] == w[..6] && b[6] & 0x0f == w[6] & 0x0f && b[7] == w[7];
    if !same {
        return None;
    }
    let ord = u32::from_be_bytes([b[8] & 0x3f, b[9], b[10], b[11]]);
    let index = u32::from_be_bytes([b[12], b[13], b[14], b[15]]);
    // The variant's bits took ord's top two: an ord that large is never stored.
    (unborn_task_id(workflow, ord, index) == id).then_some((ord, index))
}

/// A job's members without rows, as stored.
#[derive(Debug, Clone)]
pub(crate) struct Unborn {
    pub workflow_id: Uuid,
    pub job: String,
    pub ord: u32,
    /// The next index to be born; none are left past `last`.
    pub next: u32,
    pub last: u32,
    /// PENDING while they wait; else what ended them all, and why.
    pub status: TaskStatus,
    pub reason: Option<String>,
    pub created_at: Millis,
    pub ended_at: Option<Millis>,
}

pub(crate) fn unborn_row(r: &impl Cols) -> Result<Unborn> {
    Ok(Unborn {
        workflow_id: uuid(&r.col::<String>("workflow_id"))?,
        job: r.col("job"),
        ord: r.col::<i64>("ord") as u32,
        next: r.col::<i64>("next_idx") as u32,
        last: r.col::<i64>("last_idx") as u32,
        status: parse(&r.col::<String>("status"))?,
        reason: r.col("reason"),
        created_at: r.col("created_at"),
        ended_at: r.col("ended_at"),
    })
}

/// A task's place in its workflow's order: its job's, then its index (a job's one task
/// without an index first).
pub(crate) type Position = (u32, i64);

impl Unborn {
    fn contains(&self, ord: u32, index: u32) -> bool {
        self.ord == ord && (self.next..=self.last).contains(&index)
    }

    /// The task at `index`, as a row would show it.
    fn row(&self, index: u32) -> TaskRow {
        TaskRow {
            id: unborn_task_id(self.workflow_id, self.ord, index),
            workflow_id: self.workflow_id,
            job: self.job.clone(),
            index: Some(index),
            ord: self.ord,
            status: self.status,
            reason: self.reason.clone(),
            attempts: 0,
            live_attempt: None,
            node: None,
            exit_code: None,
            created_at: self.created_at,
            ended_at: self.ended_at,
            not_before: None,
        }
    }

    /// Up to `limit` of its tasks after `after`, in order.
    fn after(&self, after: Position, limit: usize) -> impl Iterator<Item = TaskRow> + '_ {
        let from = match self.ord.cmp(&after.0) {
            std::cmp::Ordering::Less => self.last as i64 + 1,
            std::cmp::Ordering::Equal => (after.1 + 1).max(self.next as i64),
            std::cmp::Ordering::Greater => self.next as i64,
        };
        (from..=self.last as i64)
            .take(limit)
            .map(move |i| self.row(i as u32))
    }
}

/// Where a page starts: after the task `after` of `workflow`, which is either one with a row
/// (`born`: its position, looked up by the caller) or one of `unborn`'s. `None` when it is
/// neither: not a task of this workflow.
pub(crate) fn page_start(
    workflow: Uuid,
    after: Option<Uuid>,
    born: Option<Position>,
    unborn: &[Unborn],
) -> Option<Position> {
    let Some(id) = after else {
        return Some((0, i64::MIN));
    };
    if born.is_some() {
        return born;
    }
    let (ord, index) = unborn_position(workflow, id)?;
    unborn
        .iter()
        .any(|u| u.contains(ord, index))
        .then_some((ord, i64::from(index)))
}

/// A page: `born` (the first `limit` rows after the start, in order, of the statuses asked)
/// merged with the unborn tasks after the start, of the statuses asked, the first `limit`.
pub(crate) fn page(
    mut born: Vec<TaskRow>,
    unborn: &[Unborn],
    start: Position,
    statuses: &[TaskStatus],
    limit: usize,
) -> Vec<TaskRow> {
    for u in unborn {
        if statuses.is_empty() || statuses.contains(&u.status) {
            born.extend(u.after(start, limit));
        }
    }
    born.sort_by_key(|t| (t.ord, t.index.map_or(-1, i64::from)));
    born.truncate(limit);
    born
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unborn_id_names_its_position_in_its_own_workflow_only() {
        let w = Uuid::new_v4();
        for (ord, index) in [(0, 0), (3, 1_000_000), ((1 << 30) - 1, u32::MAX)] {
            let id = unborn_task_id(w, ord, index);
            assert_eq!(id.get_version_num(), 8);
            assert_eq!(unborn_position(w, id), Some((ord, index)));
            assert_eq!(unborn_position(Uuid::new_v4(), id), None);
        }
        assert_eq!(unborn_position(w, Uuid::new_v4()), None);
        assert_ne!(unborn_task_id(w, 1, 2), unborn_task_id(w, 2, 1));
    }

    fn range(w: Uuid, ord: u32, next: u32, last: u32, status: TaskStatus) -> Unborn {
        Unborn {
            workflow_id: w,
            job: format!("j{ord}"),
            ord,
            next,
            last,
            status,
            reason: None,
            created_at: 0,
            ended_at: None,
        }
    }

    #[test]
    fn a_page_merges_rows_and_ranges_in_order() {
        let w = Uuid::new_v4();
        let u = [
            range(w, 0, 3, 5, TaskStatus::Pending),
            range(w, 2, 1, 2, TaskStatus::Stopped),
        ];
        let born = |ord, index: Option<u32>| TaskRow {
            index,
            ord,
            status: TaskStatus::Finished,
            ..u[0].row(0)
        };
        let rows = vec![born(0, Some(1)), born(0, Some(2)), born(1, None)];
        let keys = |p: &[TaskRow]| -> Vec<(u32, Option<u32>)> {
            p.iter().map(|t| (t.ord, t.index)).collect()
        };
        let all = page(rows.clone(), &u, (0, i64::MIN), &[], 10);
        assert_eq!(
            keys(&all),
            [
                (0, Some(1)),
                (0, Some(2)),
                (0, Some(3)),
                (0, Some(4)),
                (0, Some(5)),
                (1, None),
                (2, Some(1)),
                (2, Some(2))
            ]
        );
        // From the middle of a range, by an unborn task's id.
        let start = page_start(w, Some(unborn_task_id(w, 0, 3)), None, &u).unwrap();
        let p = page(rows[2..].to_vec(), &u, start, &[], 3);
        assert_eq!(keys(&p), [(0, Some(4)), (0, Some(5)), (1, None)]);
        // Only the statuses asked.
        let stopped = page(vec![], &u, (0, i64::MIN), &[TaskStatus::Stopped], 10);
        assert_eq!(keys(&stopped), [(2, Some(1)), (2, Some(2))]);
        // An id of no task of this workflow starts nothing.
        assert_eq!(page_start(w, Some(unborn_task_id(w, 0, 6)), None, &u), None);
        assert_eq!(page_start(w, Some(unborn_task_id(w, 0, 2)), None, &u), None);
        let other = Uuid::new_v4();
        assert_eq!(
            page_start(w, Some(unborn_task_id(other, 0, 4)), None, &u),
            None
        );
    }
}
