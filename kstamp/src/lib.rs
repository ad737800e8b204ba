//! Kernel timestamps on UDP sockets: when a datagram reached this host (`SO_TIMESTAMPNS`, or
//! `SO_TIMESTAMP` in microseconds where only that one is known: qemu's user-mode emulation) and
//! when a sent datagram left it (`SO_TIMESTAMPING` software stamps, read back from the socket's
//! error queue), through nix's safe wrappers.
//!
//! Invariant: every time is the wall clock in nanoseconds since 1970 as the kernel stamped it,
//! `None` where the kernel gave none (never a zero or negative time); nothing here blocks longer
//! than the socket's own read timeout, and a socket whose options are refused still works (the
//! stamps are then simply absent).
#![forbid(unsafe_code)]

use std::net::{SocketAddr, UdpSocket};
use std::time::{SystemTime, UNIX_EPOCH};

/// The wall clock in ns since 1970 (0 if the clock is before 1970).
pub fn wall_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The kernel receive timestamps a probe socket delivers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelStamps {
    /// `SO_TIMESTAMPNS`: nanoseconds.
    Nanoseconds,
    /// `SO_TIMESTAMP`: microseconds (qemu's user-mode emulation knows only this one).
    Microseconds,
    /// None: a datagram's arrival is when the thread reads it.
    Off,
}

/// Turns on the kernel's receive timestamps on the probe socket: `SO_TIMESTAMPNS`, else
/// `SO_TIMESTAMP`; [`KernelStamps::Off`] where the system refuses both.
pub fn enable_kernel_stamps(sock: &UdpSocket) -> KernelStamps {
    use nix::sys::socket::{setsockopt, sockopt};
    if setsockopt(sock, sockopt::ReceiveTimestampns, &true).is_ok() {
        KernelStamps::Nanoseconds
    } else if setsockopt(sock, sockopt::ReceiveTimestamp, &true).is_ok() {
        KernelStamps::Microseconds
    } else {
        KernelStamps::Off
    }
}

/// Turns on the kernel's software send timestamps (`SO_TIMESTAMPING`, returned with the sent
/// packet on the socket's error queue, read by [`recv_sent`]); false where the system
/// refuses (qemu's user-mode emulation does).
pub fn enable_send_stamps(sock: &UdpSocket) -> bool {
    use nix::sys::socket::{setsockopt, sockopt, TimestampingFlag};
    let flags = TimestampingFlag::SOF_TIMESTAMPING_TX_SOFTWARE
        | TimestampingFlag::SOF_TIMESTAMPING_SOFTWARE
        | TimestampingFlag::from_bits_retain(nix::libc::SOF_TIMESTAMPING_TX_SCHED);
    setsockopt(sock, sockopt::Timestamping, &flags).is_ok()
}

/// One sent packet back from the socket's error queue with its kernel send time (wall clock
/// ns, `None` if the entry carried none): the packet fills `buf[..len]` as the kernel returns
/// it (IP and UDP headers, on some devices a link header, then the payload: the payload is its
/// tail). `Ok(None)` when the queue is empty.
pub fn recv_sent(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> std::io::Result<Option<(usize, Option<u64>)>> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
    use std::os::fd::AsRawFd;
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!(
        nix::sys::socket::Timestamps,
        nix::libc::sock_extended_err,
        nix::libc::sockaddr_in6
    );
    let msg = match recvmsg::<SockaddrStorage>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_ERRQUEUE | MsgFlags::MSG_DONTWAIT,
    ) {
        Ok(m) => m,
        Err(nix::errno::Errno::EAGAIN) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let mut stamp = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmTimestampsns(ts) = c {
                stamp = timespec_ns(&ts.system);
            }
        }
    }
    // A truncated packet's tail is not its payload's.
    let len = if msg.flags.contains(MsgFlags::MSG_TRUNC) {
        0
    } else {
        msg.bytes
    };
    Ok(Some((len, stamp)))
}

fn timespec_ns(ts: &nix::sys::time::TimeSpec) -> Option<u64> {
    let ns = i128::from(ts.tv_sec()) * 1_000_000_000 + i128::from(ts.tv_nsec());
    u64::try_from(ns).ok().filter(|n| *n != 0)
}

/// Receives a datagram with the kernel's receive time (wall clock ns) when the socket has
/// receive timestamps on ([`enable_kernel_stamps`]): the time the datagram arrived, not when
/// this thread woke up.
pub fn recv_stamped(
    sock: &UdpSocket,
    buf: &mut [u8],
) -> std::io::Result<(usize, SocketAddr, Option<u64>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags, SockaddrStorage};
    use std::os::fd::AsRawFd;
    let mut iov = [std::io::IoSliceMut::new(buf)];
    // Room for both stamps a socket with send timestamps on also gets with each datagram
    // (SCM_TIMESTAMPNS and SCM_TIMESTAMPING): a truncated control buffer yields none.
    let mut space = nix::cmsg_space!(nix::sys::time::TimeSpec, nix::sys::socket::Timestamps);
    let msg = recvmsg::<SockaddrStorage>(
        sock.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::empty(),
    )
    .map_err(std::io::Error::from)?;
    let mut stamp = None;
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            match c {
                ControlMessageOwned::ScmTimestampns(ts) => stamp = timespec_ns(&ts),
                ControlMessageOwned::ScmTimestamp(tv) => {
                    let ns =
                        i128::from(tv.tv_sec()) * 1_000_000_000 + i128::from(tv.tv_usec()) * 1_000;
                    stamp = u64::try_from(ns).ok().filter(|n| *n != 0);
                }
                _ => {}
            }
        }
    }
    let from = msg.address.as_ref().and_then(|a| {
        a.as_sockaddr_in()
            .map(|v4| SocketAddr::from(*v4))
            .or_else(|| a.as_sockaddr_in6().map(|v6| SocketAddr::from(*v6)))
    });
    let n = msg.bytes;
    let from = from.ok_or_else(|| std::io::Error::other("datagram without a source address"))?;
    Ok((n, from, stamp))
}

/// `(now_ns, wall_ns)` moved back to the kernel's receive time `kernel_wall_ns` when it is
/// plausible (at most 1 s ago; a clock step in between leaves both as they are).
pub fn backdate(now_ns: u64, wall_ns: u64, kernel_wall_ns: Option<u64>) -> (u64, u64) {
    match kernel_wall_ns {
        Some(k) if k <= wall_ns && wall_ns - k < 1_000_000_000 => {
            (now_ns.saturating_sub(wall_ns - k), k)
        }
        _ => (now_ns, wall_ns),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_kernel_receive_time_is_when_the_datagram_arrived() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert_eq!(enable_kernel_stamps(&rx), KernelStamps::Nanoseconds);
        // The kernel turns its receive stamping on a moment later (deferred work): until
        // then the stamp is the time of the recvmsg call. Retry for up to 5 s.
        let mut buf = [0u8; 16];
        let mut late_ms = 0.0;
        for _ in 0..50 {
            tx.send_to(b"ping", rx.local_addr().unwrap()).unwrap();
            // The receiving thread wakes up late: the stamp is still the arrival.
            std::thread::sleep(Duration::from_millis(50));
            let (n, from, stamp) = recv_stamped(&rx, &mut buf).unwrap();
            assert_eq!((n, from), (4, tx.local_addr().unwrap()));
            late_ms = (wall_ns() - stamp.expect("a kernel stamp")) as f64 / 1e6;
            if late_ms >= 45.0 {
                break;
            }
        }
        assert!((45.0..5000.0).contains(&late_ms), "{late_ms}");
        // Without the option: no stamp; a timeout is WouldBlock as with recv_from.
        let plain = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"x", plain.local_addr().unwrap()).unwrap();
        assert_eq!(recv_stamped(&plain, &mut buf).unwrap().2, None);
        plain
            .set_read_timeout(Some(Duration::from_millis(10)))
            .unwrap();
        let e = recv_stamped(&plain, &mut buf).unwrap_err();
        assert!(
            matches!(
                e.kind(),
                std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
            ),
            "{e}"
        );
    }

    #[test]
    fn microsecond_receive_stamps_are_read_where_nanoseconds_are_refused() {
        // qemu's user-mode emulation refuses SO_TIMESTAMPNS but translates SO_TIMESTAMP.
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        nix::sys::socket::setsockopt(&rx, nix::sys::socket::sockopt::ReceiveTimestamp, &true)
            .unwrap();
        let mut buf = [0u8; 16];
        let before = wall_ns() / 1000 * 1000;
        tx.send_to(b"ping", rx.local_addr().unwrap()).unwrap();
        let (n, _, stamp) = recv_stamped(&rx, &mut buf).unwrap();
        let stamp = stamp.expect("a microsecond stamp");
        assert_eq!(n, 4);
        assert_eq!(stamp % 1000, 0);
        assert!((before..=wall_ns()).contains(&stamp), "{before} <= {stamp}");
    }

    #[test]
    fn backdating_moves_both_clocks_to_the_arrival() {
        assert_eq!(backdate(10_000, 50_000, Some(48_000)), (8_000, 48_000));
        assert_eq!(backdate(10_000, 50_000, None), (10_000, 50_000));
        // A stamp from the future or from long ago (clock stepped): ignored.
        assert_eq!(backdate(10_000, 50_000, Some(60_000)), (10_000, 50_000));
        let w = 5_000_000_000;
        assert_eq!(backdate(10, w, Some(w - 2_000_000_000)), (10, w));
    }
}
