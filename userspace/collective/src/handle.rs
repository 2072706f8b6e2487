//! [`Handle`]: an operation in flight, waited on, polled as a future, or watched.

use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Receiver;
use std::sync::{Arc, Mutex};

use crate::engine::{Progress, WorkBuf};
use crate::error::{CollectiveError, Result};

/// Turns the engine's buffer back into what the caller asked for.
pub(crate) type Finish<R> = Box<dyn FnOnce(Box<dyn Any + Send>) -> Result<R>>;

/// An operation in flight. `wait` blocks until it is done; it is also a
/// [`Future`](std::future::Future) for async callers; `progress` may be polled meanwhile.
#[must_use = "an operation's result is only seen through its handle"]
pub struct Handle<R> {
    pub(crate) rx: Receiver<Result<Box<dyn WorkBuf>>>,
    pub(crate) map: Option<Finish<R>>,
    pub(crate) progress: Arc<Progress>,
    pub(crate) waker: Arc<Mutex<Option<std::task::Waker>>>,
}

impl<R> Handle<R> {
    pub fn wait(mut self) -> Result<R> {
        let res = self.rx.recv().map_err(|_| CollectiveError::Closed);
        self.finish(res)
    }

    fn finish(
        &mut self,
        res: std::result::Result<Result<Box<dyn WorkBuf>>, CollectiveError>,
    ) -> Result<R> {
        let buf = res??;
        let map = self.map.take().ok_or(CollectiveError::Closed)?;
        map(buf.into_any())
    }

    /// True once `wait` will return without blocking.
    pub fn is_finished(&self) -> bool {
        self.progress.finished.load(Ordering::Acquire)
    }

    /// (bytes received so far, bytes this rank receives in total) for this
    /// operation; both 0 while it is still queued.
    pub fn progress(&self) -> (u64, u64) {
        (
            self.progress.done.load(Ordering::Relaxed),
            self.progress.total.load(Ordering::Relaxed),
        )
    }
}

impl<R> std::future::Future for Handle<R> {
    type Output = Result<R>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<R>> {
        use std::sync::mpsc::TryRecvError;
        use std::task::Poll;
        let this = self.get_mut();
        for attempt in 0..2 {
            match this.rx.try_recv() {
                Ok(res) => return Poll::Ready(this.finish(Ok(res))),
                Err(TryRecvError::Disconnected) => {
                    return Poll::Ready(Err(CollectiveError::Closed))
                }
                Err(TryRecvError::Empty) if attempt == 0 => {
                    // Register, then look again: the engine may have replied in between.
                    if let Ok(mut w) = this.waker.lock() {
                        *w = Some(cx.waker().clone());
                    }
                }
                Err(TryRecvError::Empty) => {}
            }
        }
        Poll::Pending
    }
}
