//! Signals sent to leaderrun, sorted by what they mean for the command.

use nix::sys::signal::Signal;
use tokio::signal::unix::{SignalKind, signal};

/// What a received signal asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    /// SIGHUP, SIGUSR1, SIGUSR2, SIGWINCH: pass on to the command's group.
    Forward(Signal),
    /// SIGTERM, SIGINT, SIGQUIT: stop the command, release the lease, exit.
    Shutdown(Signal),
}

/// Listens for every signal leaderrun handles. Installed once, early, so that
/// a signal is never lost to its default action.
pub struct Signals {
    streams: Vec<(Signal, tokio::signal::unix::Signal)>,
}

const FORWARDED: [Signal; 4] = [
    Signal::SIGHUP,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];
const SHUTDOWN: [Signal; 3] = [Signal::SIGTERM, Signal::SIGINT, Signal::SIGQUIT];

impl Signals {
    pub fn install() -> std::io::Result<Signals> {
        let mut streams = Vec::new();
        for sig in FORWARDED.iter().chain(SHUTDOWN.iter()) {
            streams.push((*sig, signal(SignalKind::from_raw(*sig as i32))?));
        }
        Ok(Signals { streams })
    }

    /// The next signal received. Cancel-safe.
    pub async fn recv(&mut self) -> Request {
        let futures = self.streams.iter_mut().map(|(sig, stream)| {
            let sig = *sig;
            Box::pin(async move {
                stream.recv().await;
                sig
            })
        });
        let (sig, _, _) = futures_select_all(futures).await;
        if SHUTDOWN.contains(&sig) {
            Request::Shutdown(sig)
        } else {
            Request::Forward(sig)
        }
    }
}

/// Waits for the first of several futures (a tiny `select_all`).
async fn futures_select_all<F: std::future::Future + Unpin>(
    futures: impl IntoIterator<Item = F>,
) -> (F::Output, usize, ()) {
    let mut futures: Vec<F> = futures.into_iter().collect();
    std::future::poll_fn(move |cx| {
        for (i, f) in futures.iter_mut().enumerate() {
            if let std::task::Poll::Ready(out) = std::pin::Pin::new(f).poll(cx) {
                return std::task::Poll::Ready((out, i, ()));
            }
        }
        std::task::Poll::Pending
    })
    .await
}
