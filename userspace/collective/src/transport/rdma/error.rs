//! Typed errors of the RDMA transport. Each one ends only the connection it
//! happened on (or, at set-up, that pair's RDMA attempt).

/// What went wrong on an RDMA device or connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RdmaError {
    /// No RDMA device carries this rank's address (or it cannot be opened).
    #[error("rdma: no usable device: {0}")]
    NoDevice(String),
    /// The device exists but its port is not active.
    #[error("rdma: port 1 of {device} is not active (state {state})")]
    PortDown { device: String, state: u32 },
    /// Creating or connecting a queue pair failed.
    #[error("rdma: set-up failed: {0}")]
    Setup(String),
    /// `ibv_reg_mr` refused the memory.
    #[error("rdma: registering {bytes} bytes failed: {reason}")]
    Registration { bytes: usize, reason: String },
    /// Posting a work request failed.
    #[error("rdma: {verb} failed: {reason}")]
    Post { verb: String, reason: String },
    /// A work request completed in error: the QP is in the error state.
    #[error("rdma: QP {qpn} to {peer}: work request completed with status {status} ({name}, vendor error {vendor})")]
    Qp {
        peer: String,
        qpn: u32,
        status: u32,
        name: &'static str,
        vendor: u32,
    },
    /// The peer closed or went away (its QP is gone, or the link was closed).
    #[error("rdma: peer {0} gone")]
    PeerGone(String),
    /// The peer's connection info was malformed.
    #[error("rdma: bad connection info from {peer}: {reason}")]
    BadInfo { peer: String, reason: String },
    /// The build has no RDMA support (cargo feature `rdma`).
    #[error(
        "rdma: this build has no RDMA transport (cargo feature `rdma` of causeway-collective)"
    )]
    NotBuilt,
}

impl RdmaError {
    /// As an io::Error for the byte-stream halves (the link layer reports it).
    pub fn into_io(self) -> std::io::Error {
        let kind = match self {
            RdmaError::PeerGone(_) => std::io::ErrorKind::BrokenPipe,
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, self)
    }
}

/// The name of an `ibv_wc_status` value (`man ibv_poll_cq`).
pub fn status_name(status: u32) -> &'static str {
    match status {
        0 => "SUCCESS",
        1 => "LOC_LEN_ERR",
        2 => "LOC_QP_OP_ERR",
        3 => "LOC_EEC_OP_ERR",
        4 => "LOC_PROT_ERR",
        5 => "WR_FLUSH_ERR",
        6 => "MW_BIND_ERR",
        7 => "BAD_RESP_ERR",
        8 => "LOC_ACCESS_ERR",
        9 => "REM_INV_REQ_ERR",
        10 => "REM_ACCESS_ERR",
        11 => "REM_OP_ERR",
        12 => "RETRY_EXC_ERR",
        13 => "RNR_RETRY_EXC_ERR",
        _ => "OTHER",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_qp_error_names_the_peer_and_the_status() {
        let e = RdmaError::Qp {
            peer: "rank 1".into(),
            qpn: 17,
            status: 12,
            name: status_name(12),
            vendor: 0,
        };
        let s = e.to_string();
        assert!(
            s.contains("rank 1") && s.contains("12") && s.contains("RETRY_EXC_ERR"),
            "{s}"
        );
        let io = RdmaError::PeerGone("rank 2".into()).into_io();
        assert_eq!(io.kind(), std::io::ErrorKind::BrokenPipe);
        assert!(io.to_string().contains("rank 2"));
    }
}
