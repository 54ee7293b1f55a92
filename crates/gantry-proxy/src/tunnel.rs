//! Upgraded connections (WebSocket): the client's and the backend's copied into each other as
//! bytes, so extensions and subprotocols pass untouched. For a WebSocket the copy also tracks
//! frame boundaries (headers only, nothing is buffered), so that a cut can finish the frame in
//! progress and then close both sides with code 1001 (going away).

use std::time::Duration;

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::drain::InFlight;

/// A close frame with status 1001 as a server sends it (unmasked).
const CLOSE_GOING_AWAY: [u8; 4] = [0x88, 0x02, 0x03, 0xE9];

/// The same close frame as a client sends it: masked, with a fresh key.
fn masked_close_going_away() -> [u8; 8] {
    let mut key = [0u8; 4];
    if getrandom::fill(&mut key).is_err() {
        // The key only keeps intermediaries from mistaking frames for requests.
        key = (std::process::id() ^ 0x5a5a_a5a5).to_le_bytes();
    }
    [
        0x88,
        0x82,
        key[0],
        key[1],
        key[2],
        key[3],
        0x03 ^ key[0],
        0xE9 ^ key[1],
    ]
}

/// Where a WebSocket byte stream is: in a frame header, in a payload, or between frames.
#[derive(Debug, Default)]
pub(super) struct Frames {
    head: [u8; 14],
    have: usize,
    remaining: u64,
}

impl Frames {
    pub(super) fn at_boundary(&self) -> bool {
        self.have == 0 && self.remaining == 0
    }

    fn header_len(&self) -> Option<usize> {
        if self.have < 2 {
            return None;
        }
        let extended = match self.head[1] & 0x7f {
            126 => 2,
            127 => 8,
            _ => 0,
        };
        let mask = if self.head[1] & 0x80 != 0 { 4 } else { 0 };
        Some(2 + extended + mask)
    }

    fn payload_len(&self) -> u64 {
        match self.head[1] & 0x7f {
            126 => u64::from(u16::from_be_bytes([self.head[2], self.head[3]])),
            127 => u64::from_be_bytes(self.head[2..10].try_into().expect("eight bytes")),
            n => u64::from(n),
        }
    }

    /// Follows `data` through the stream; with `stop_at_boundary`, stops at the first frame
    /// boundary reached. Returns how many bytes of `data` it took.
    pub(super) fn advance(&mut self, data: &[u8], stop_at_boundary: bool) -> usize {
        let mut i = 0;
        while i < data.len() {
            if stop_at_boundary && self.at_boundary() {
                break;
            }
            if self.remaining > 0 {
                let take =
                    (data.len() - i).min(usize::try_from(self.remaining).unwrap_or(usize::MAX));
                self.remaining -= take as u64;
                i += take;
                continue;
            }
            self.head[self.have] = data[i];
            self.have += 1;
            i += 1;
            if self.header_len() == Some(self.have) {
                self.remaining = self.payload_len();
                self.have = 0;
            }
        }
        i
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The source closed; the destination was told (write side shut down).
    Eof,
    /// Stopped by a cut, at a frame boundary.
    Cut,
    Failed,
}

/// Copies `src` into `dst` until the source closes, something fails, or `cancel` fires.
async fn pump<R, W>(
    src: &mut R,
    dst: &mut W,
    frames: &mut Option<Frames>,
    cancel: &CancellationToken,
) -> End
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = tokio::select! {
            biased;
            _ = cancel.cancelled() => break,
            read = src.read(&mut buf) => match read {
                Ok(0) => {
                    let _ = dst.shutdown().await;
                    return End::Eof;
                }
                Ok(n) => n,
                Err(_) => return End::Failed,
            },
        };
        if dst.write_all(&buf[..n]).await.is_err() || dst.flush().await.is_err() {
            return End::Failed;
        }
        if let Some(frames) = frames {
            frames.advance(&buf[..n], false);
        }
    }
    // Cut: finish the frame in progress, so that a close frame can follow it.
    let Some(frames) = frames else {
        return End::Cut;
    };
    while !frames.at_boundary() {
        let n = match src.read(&mut buf).await {
            Ok(0) | Err(_) => return End::Failed,
            Ok(n) => n,
        };
        let upto = frames.advance(&buf[..n], true);
        if dst.write_all(&buf[..upto]).await.is_err() || dst.flush().await.is_err() {
            return End::Failed;
        }
    }
    End::Cut
}

async fn discard<R: AsyncRead + Unpin>(src: &mut R) {
    let mut buf = [0u8; 1024];
    while let Ok(1..) = src.read(&mut buf).await {}
}

/// Runs an upgraded connection through to its end, holding its request's count.
pub(super) async fn run(
    client: OnUpgrade,
    backend: OnUpgrade,
    guard: InFlight,
    websocket: bool,
    grace: Duration,
) {
    let cancel = guard.generation().cancel.clone();
    let upgraded = tokio::select! {
        both = async { tokio::try_join!(client, backend) } => both,
        _ = cancel.cancelled() => return,
    };
    let (client, backend) = match upgraded {
        Ok(both) => both,
        Err(e) => {
            tracing::debug!("endpoint upgrade failed: {e}");
            return;
        }
    };
    let (mut client_rx, mut client_tx) = tokio::io::split(TokioIo::new(client));
    let (mut backend_rx, mut backend_tx) = tokio::io::split(TokioIo::new(backend));
    let mut up = websocket.then(Frames::default);
    let mut down = websocket.then(Frames::default);

    let work = async {
        {
            let to_backend = pump(&mut client_rx, &mut backend_tx, &mut up, &cancel);
            let to_client = pump(&mut backend_rx, &mut client_tx, &mut down, &cancel);
            tokio::pin!(to_backend, to_client);
            // One side failing (a reset) ends both. One side closing is passed on, and the
            // other gets the grace to follow (its close reply, its end of the connection).
            let first = tokio::select! {
                end = &mut to_backend => (end, to_client.as_mut()),
                end = &mut to_client => (end, to_backend.as_mut()),
            };
            match first {
                (End::Failed, _) if !cancel.is_cancelled() => return,
                (End::Eof, other) if !cancel.is_cancelled() => {
                    let _ = tokio::time::timeout(grace, other).await;
                    return;
                }
                (_, other) => {
                    other.await;
                }
            }
        }
        if !cancel.is_cancelled() {
            return;
        }
        // Cut: say goodbye on each side that sits between frames, then wait for the peers to
        // close (a close reply, then their end of the connection).
        if down.as_ref().is_some_and(Frames::at_boundary) {
            let _ = client_tx.write_all(&CLOSE_GOING_AWAY).await;
        }
        if up.as_ref().is_some_and(Frames::at_boundary) {
            let _ = backend_tx.write_all(&masked_close_going_away()).await;
        }
        let _ = tokio::join!(client_tx.shutdown(), backend_tx.shutdown());
        // Closed as far as draining goes; the peers' replies are read without holding the cut.
        drop(guard);
        tokio::join!(discard(&mut client_rx), discard(&mut backend_rx));
    };
    tokio::pin!(work);
    tokio::select! {
        _ = &mut work => {}
        // After a cut, whatever has not finished within the grace is dropped.
        _ = async {
            cancel.cancelled().await;
            tokio::time::sleep(grace).await;
        } => {}
    }
}

#[cfg(test)]
mod tests {
    use super::Frames;

    fn frame(payload_len: usize, masked: bool) -> Vec<u8> {
        let mut f = vec![0x82];
        let mask_bit = if masked { 0x80 } else { 0 };
        match payload_len {
            0..=125 => f.push(mask_bit | payload_len as u8),
            126..=0xffff => {
                f.push(mask_bit | 126);
                f.extend_from_slice(&(payload_len as u16).to_be_bytes());
            }
            _ => {
                f.push(mask_bit | 127);
                f.extend_from_slice(&(payload_len as u64).to_be_bytes());
            }
        }
        if masked {
            f.extend_from_slice(&[1, 2, 3, 4]);
        }
        f.extend(std::iter::repeat_n(7u8, payload_len));
        f
    }

    #[test]
    fn tracks_boundaries_across_any_split() {
        let mut stream = Vec::new();
        let mut ends = Vec::new();
        for (len, masked) in [
            (0, false),
            (5, true),
            (125, false),
            (126, true),
            (70_000, false),
        ] {
            stream.extend(frame(len, masked));
            ends.push(stream.len());
        }
        for chunk in [1, 2, 3, 7, 100, 4096, stream.len()] {
            let mut frames = Frames::default();
            let mut seen = Vec::new();
            for (i, piece) in stream.chunks(chunk).enumerate() {
                let mut at = 0;
                while at < piece.len() {
                    at += frames.advance(&piece[at..], true);
                    if frames.at_boundary() && i * chunk + at > 0 {
                        seen.push(i * chunk + at);
                    }
                    if frames.at_boundary() && at < piece.len() {
                        // step over the boundary: take one byte of the next frame
                        at += frames.advance(&piece[at..at + 1], false);
                    }
                }
            }
            seen.dedup();
            assert_eq!(seen, ends, "chunks of {chunk}");
        }
    }

    #[test]
    fn stops_at_the_end_of_the_frame_in_progress() {
        let mut frames = Frames::default();
        let first = frame(10, true);
        let second = frame(3, true);
        frames.advance(&first[..5], false);
        assert!(!frames.at_boundary());
        let mut rest = first[5..].to_vec();
        rest.extend(&second);
        assert_eq!(frames.advance(&rest, true), first.len() - 5);
        assert!(frames.at_boundary());
    }
}
