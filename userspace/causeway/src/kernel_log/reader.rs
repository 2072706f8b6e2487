//! Reads one interface's log records and hands each to a callback.

use std::sync::Arc;

use aya_log::EbpfLogger;
use tokio::io::unix::AsyncFd;

use super::KernelLogError;

/// One record of an interface's programs.
#[derive(Clone, Debug, serde::Serialize)]
pub struct LogLine {
    pub iface: String,
    /// `error`, `warn`, `info`, `debug` or `trace`.
    pub level: &'static str,
    pub message: String,
}

type Callback = Arc<dyn Fn(LogLine) + Send + Sync>;

/// aya-log's sink: turns each record into a [`LogLine`].
struct Sink {
    iface: String,
    on_line: Callback,
}

impl ::log::Log for Sink {
    fn enabled(&self, _: &::log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &::log::Record<'_>) {
        let level = match record.level() {
            ::log::Level::Error => "error",
            ::log::Level::Warn => "warn",
            ::log::Level::Info => "info",
            ::log::Level::Debug => "debug",
            ::log::Level::Trace => "trace",
        };
        (self.on_line)(LogLine {
            iface: self.iface.clone(),
            level,
            message: record.args().to_string(),
        });
    }

    fn flush(&self) {}
}

/// The record buffer of one interface's programs.
pub struct Reader {
    logger: EbpfLogger<Sink>,
}

impl Reader {
    /// Opens the buffer of program `prog_id` (the interface's XDP program)
    /// of interface `iface`; each record read is passed to `on_line`.
    pub fn open(
        prog_id: u32,
        iface: &str,
        on_line: impl Fn(LogLine) + Send + Sync + 'static,
    ) -> Result<Self, KernelLogError> {
        let sink = Sink {
            iface: iface.to_string(),
            on_line: Arc::new(on_line),
        };
        let logger = EbpfLogger::init_from_id_with_logger(prog_id, sink).map_err(|source| {
            KernelLogError::Buffer {
                prog_id,
                source: Box::new(source),
            }
        })?;
        Ok(Self { logger })
    }

    /// Passes every record in the buffer now to the callback.
    pub fn drain(&mut self) {
        self.logger.flush();
    }

    /// Passes records to the callback as they arrive, until the task is
    /// dropped (needs a tokio reactor).
    pub async fn follow(self) -> Result<(), KernelLogError> {
        // SAFETY: the logger owns its ring buffer's fd (aya's MapData holds
        // an OwnedFd): it stays open, and `as_raw_fd` returns that same fd,
        // for as long as the logger lives, which is as long as the AsyncFd.
        let registered =
            unsafe { AsyncFd::register_with_interest(self.logger, tokio::io::Interest::READABLE) };
        let mut fd = registered.map_err(|e| KernelLogError::Poll(e.into_parts().1))?;
        loop {
            let mut guard = fd.readable_mut().await.map_err(KernelLogError::Poll)?;
            guard.get_inner_mut().flush();
            guard.clear_ready();
        }
    }
}
