//! Backend generations: what runs on each, waiting for it to drain, cutting what is left.

use std::error::Error as StdError;
use std::future::Future as _;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::http::uri::Authority;
use hyper::body::{Body as HttpBody, Bytes, Frame, Incoming, SizeHint};
use pin_project_lite::pin_project;
use tokio::sync::Notify;
use tokio_util::sync::{CancellationToken, WaitForCancellationFutureOwned};

use super::Backend;

pub(super) type BoxError = Box<dyn StdError + Send + Sync>;

/// One backend of one endpoint, from the switch that made it current until its last request
/// has ended.
pub(super) struct Generation {
    pub(super) backend: Backend,
    /// `addr` as a URI authority, made once.
    pub(super) authority: Authority,
    count: AtomicUsize,
    /// Set by the switch away from it; a request that sees it after counting itself backs off.
    retired: AtomicBool,
    /// Woken when `count` drops to zero.
    idle: Notify,
    /// Cancelled by `cut`: bodies and tunnels of this generation end.
    pub(super) cancel: CancellationToken,
}

impl Generation {
    pub(super) fn new(backend: Backend) -> Arc<Self> {
        let authority = Authority::try_from(backend.addr.to_string().as_str())
            .expect("a socket address is a valid authority");
        Arc::new(Self {
            backend,
            authority,
            count: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            idle: Notify::new(),
            cancel: CancellationToken::new(),
        })
    }

    pub(super) fn retire(&self) {
        self.retired.store(true, SeqCst);
    }

    pub(super) fn in_flight(&self) -> usize {
        self.count.load(SeqCst)
    }

    /// Waits until nothing is in flight, or `until`; says whether it got there.
    pub(super) async fn wait_idle(&self, until: tokio::time::Instant) -> bool {
        let deadline = tokio::time::sleep_until(until);
        tokio::pin!(deadline);
        loop {
            // Registered before the check, so a drop to zero in between still wakes us.
            let notified = self.idle.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.in_flight() == 0 {
                return true;
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = &mut deadline => return self.in_flight() == 0,
            }
        }
    }
}

/// One request counted against a generation; uncounted when dropped.
pub(super) struct InFlight(Arc<Generation>);

impl InFlight {
    /// Counts a request, unless the generation was retired before it could be: then `None`,
    /// and the caller takes the current generation instead.
    ///
    /// Both sides use `SeqCst`: a switch stores `retired` and then a drain reads the count. If
    /// the drain reads zero, a request counted after that read loads `retired` after the store,
    /// sees it and backs off; so a drained generation never gets a new request.
    pub(super) fn enter(generation: Arc<Generation>) -> Option<Self> {
        generation.count.fetch_add(1, SeqCst);
        let guard = InFlight(generation);
        if guard.0.retired.load(SeqCst) {
            return None; // the guard's drop uncounts it
        }
        Some(guard)
    }

    pub(super) fn generation(&self) -> &Arc<Generation> {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "the endpoint's previous backend was stopped at its drain deadline; the response was cut short"
)]
struct CutShort;

pin_project! {
    /// A backend's response body on its way to the client, frame by frame. Holds the request's
    /// count until the body ends, fails, is cut, or is dropped (the client went away).
    pub(super) struct Counted {
        #[pin]
        inner: Incoming,
        #[pin]
        cut: WaitForCancellationFutureOwned,
        guard: Option<InFlight>,
        // SSE ends cleanly when cut: events are whole, the client reconnects. Any other body is
        // aborted, so that a truncated download does not look complete.
        sse: bool,
    }
}

impl Counted {
    pub(super) fn new(inner: Incoming, guard: InFlight, sse: bool) -> Self {
        let cut = guard.0.cancel.clone().cancelled_owned();
        Self {
            inner,
            cut,
            guard: Some(guard),
            sse,
        }
    }
}

impl HttpBody for Counted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let mut this = self.project();
        let Some(guard) = this.guard.as_ref() else {
            return Poll::Ready(None); // ended already
        };
        let cut = if guard.0.cancel.is_cancelled() {
            true
        } else {
            match this.inner.as_mut().poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => return Poll::Ready(Some(Ok(frame))),
                Poll::Ready(Some(Err(e))) => {
                    *this.guard = None;
                    return Poll::Ready(Some(Err(e.into())));
                }
                Poll::Ready(None) => {
                    *this.guard = None;
                    return Poll::Ready(None);
                }
                Poll::Pending => this.cut.as_mut().poll(cx).is_ready(),
            }
        };
        if !cut {
            return Poll::Pending;
        }
        *this.guard = None;
        if *this.sse {
            Poll::Ready(None)
        } else {
            Poll::Ready(Some(Err(Box::new(CutShort))))
        }
    }

    fn is_end_stream(&self) -> bool {
        self.guard.is_none() || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        if self.guard.is_none() {
            SizeHint::with_exact(0)
        } else {
            self.inner.size_hint()
        }
    }
}
