//! Group commit: writes that arrive while the store is busy with one transaction wait and go
//! together in the next. At a thousand tasks a second every agent's "running" and "exited"
//! reports were a transaction and an fsync each, one after another on the store's one writer;
//! grouped, they share one. A caller still returns only once its own write is durable, so
//! nothing is acknowledged early; a write alone goes at once (no timer, no added wait).
//!
//! Our own, not a library's: what is needed is a queue, one task and a oneshot per caller.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use tokio::sync::{mpsc, oneshot};

type Reply<O> = oneshot::Sender<Result<O, String>>;

/// What the worker takes when it starts: its end of the queue and what applies a batch.
struct Worker<I, O> {
    queue: mpsc::UnboundedReceiver<(I, Reply<O>)>,
    apply: Apply<I, O>,
}
type Apply<I, O> = Arc<
    dyn Fn(Vec<I>) -> Pin<Box<dyn Future<Output = anyhow::Result<Vec<O>>> + Send>> + Send + Sync,
>;

/// A queue of writes of one kind, applied in batches of at most `max` by `apply`, which
/// returns one output per input, in order.
pub struct Group<I, O> {
    queue: mpsc::UnboundedSender<(I, Reply<O>)>,
    /// The worker's end of the queue until the first write starts it (so that a group can be
    /// made outside a runtime).
    idle: Mutex<Option<Worker<I, O>>>,
    max: usize,
}

impl<I: Send + 'static, O: Send + 'static> Group<I, O> {
    pub fn new<F, Fut>(max: usize, apply: F) -> Self
    where
        F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = anyhow::Result<Vec<O>>> + Send + 'static,
    {
        let (queue, rx) = mpsc::unbounded_channel();
        let apply: Apply<I, O> = Arc::new(move |batch| Box::pin(apply(batch)));
        Group {
            queue,
            idle: Mutex::new(Some(Worker { queue: rx, apply })),
            max: max.max(1),
        }
    }

    /// Applies `item` with whatever else is waiting, and returns its own output once the
    /// batch that carried it is applied (an error fails every write of its batch).
    pub async fn write(&self, item: I) -> anyhow::Result<O> {
        self.start();
        let (tx, rx) = oneshot::channel();
        self.queue
            .send((item, tx))
            .map_err(|_| anyhow::anyhow!("the write queue is closed"))?;
        match rx.await {
            Ok(Ok(o)) => Ok(o),
            Ok(Err(e)) => Err(anyhow::anyhow!(e)),
            Err(_) => anyhow::bail!("the write queue dropped a write"),
        }
    }

    fn start(&self) {
        let Some(Worker {
            queue: mut rx,
            apply,
        }) = self.idle.lock().unwrap_or_else(|e| e.into_inner()).take()
        else {
            return;
        };
        let max = self.max;
        tokio::spawn(async move {
            while let Some(first) = rx.recv().await {
                let mut items = vec![first];
                while items.len() < max {
                    match rx.try_recv() {
                        Ok(next) => items.push(next),
                        Err(_) => break,
                    }
                }
                let (batch, replies): (Vec<I>, Vec<Reply<O>>) = items.into_iter().unzip();
                let n = batch.len();
                match apply(batch).await {
                    Ok(outs) if outs.len() == n => {
                        for (reply, o) in replies.into_iter().zip(outs) {
                            let _ = reply.send(Ok(o));
                        }
                    }
                    Ok(outs) => {
                        let e = format!("a batch of {n} writes gave {} results", outs.len());
                        for reply in replies {
                            let _ = reply.send(Err(e.clone()));
                        }
                    }
                    Err(e) => {
                        let e = format!("{e:#}");
                        for reply in replies {
                            let _ = reply.send(Err(e.clone()));
                        }
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn writes_waiting_together_share_a_batch_and_each_gets_its_own_output() {
        let batches = Arc::new(Mutex::new(Vec::<usize>::new()));
        let seen = batches.clone();
        let group = Arc::new(Group::new(64, move |batch: Vec<u32>| {
            let seen = seen.clone();
            async move {
                seen.lock().unwrap().push(batch.len());
                // A slow commit: what arrives meanwhile waits for the next batch.
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                Ok(batch.into_iter().map(|x| x * 10).collect())
            }
        }));
        let mut calls = vec![];
        for i in 0..200u32 {
            let g = group.clone();
            calls.push(tokio::spawn(async move { (i, g.write(i).await.unwrap()) }));
        }
        for c in calls {
            let (i, out) = c.await.unwrap();
            assert_eq!(out, i * 10, "each write gets its own output");
        }
        let sizes = batches.lock().unwrap().clone();
        assert_eq!(sizes.iter().sum::<usize>(), 200, "every write applied once");
        assert!(
            sizes.iter().all(|&n| n <= 64),
            "batches stay within max: {sizes:?}"
        );
        assert!(
            sizes.len() < 200,
            "writes waiting together were grouped: {sizes:?}"
        );
    }

    #[tokio::test]
    async fn a_failed_batch_fails_each_of_its_writes_and_the_next_batch_goes_on() {
        let calls = Arc::new(AtomicUsize::new(0));
        let n = calls.clone();
        let group = Group::new(8, move |batch: Vec<u32>| {
            let first = n.fetch_add(1, Ordering::SeqCst) == 0;
            async move {
                if first {
                    anyhow::bail!("disk full")
                }
                Ok(batch)
            }
        });
        let e = group.write(1).await.unwrap_err();
        assert!(e.to_string().contains("disk full"), "{e}");
        assert_eq!(group.write(2).await.unwrap(), 2);
    }
}
