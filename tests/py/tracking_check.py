"""CLIENT TRACKING through redis-py and raw RESP: the RESP2 redirect form
(`__redis__:invalidate` messages to a subscribed client); RESP3 push frames byte for byte as redis-server 7.0 writes them (`invalidate [key]`, a null on FLUSHALL,
BCAST prefixes with NOLOOP, OPTIN with CLIENT CACHING, `tracking-redir-broken`); and
Redis's error texts. Writes go through OTHER_PORT (the other agent of a proxy-mode
cluster, or the same agent), trackers are on PORT. Written and checked against
redis-server 7.0 first (one port).

    python3 tracking_check.py PORT [OTHER_PORT]

Prints "RESP2: ok" and "RESP3: ok". (redis-py's own client-side cache, `cache_config`,
refuses any server that reports a version below 7.4, redis-server 7.0 and DMC alike.)
"""
import socket
import sys
import time

import redis

DEADLINE = 10.0


def eq(got, want):
    assert got == want, f"got {got!r}, want {want!r}"


class Raw:
    """A raw RESP connection, to see the exact frames."""

    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.s.settimeout(0.2)
        self.buf = b""

    def send(self, *words):
        out = f"*{len(words)}\r\n".encode()
        for w in words:
            w = str(w).encode()
            out += b"$%d\r\n%s\r\n" % (len(w), w)
        self.s.sendall(out)

    def until(self, want: bytes) -> bytes:
        """Reads until `want` arrived (within the deadline); returns and drops what
        came up to and including it."""
        end = time.time() + DEADLINE
        while want not in self.buf and time.time() < end:
            try:
                self.buf += self.s.recv(65536)
            except socket.timeout:
                pass
        at = self.buf.find(want)
        assert at >= 0, f"never got {want!r}; got {self.buf!r}"
        got, self.buf = self.buf[: at + len(want)], self.buf[at + len(want):]
        return got

    def quiet(self, secs=0.5) -> bytes:
        end = time.time() + secs
        while time.time() < end:
            try:
                self.buf += self.s.recv(65536)
            except socket.timeout:
                pass
        got, self.buf = self.buf, b""
        return got

    def client_id(self) -> int:
        self.send("CLIENT", "ID")
        return int(self.until(b"\r\n")[1:-2])


def push(*keys: str) -> bytes:
    body = b"".join(b"$%d\r\n%s\r\n" % (len(k), k.encode()) for k in keys)
    return b">2\r\n$10\r\ninvalidate\r\n*%d\r\n" % len(keys) + body


def resp3(port: int, other: int) -> None:
    w = redis.Redis(port=other)
    w.delete("tk", "p:1", "p:2", "p:3", "oi:1", "oi:2")
    c = Raw(port)
    c.send("HELLO", "3")
    c.until(b"proto")
    c.quiet(0.2)
    c.send("CLIENT", "TRACKING", "on")
    eq(c.until(b"\r\n"), b"+OK\r\n")
    c.send("GET", "tk")
    eq(c.until(b"\r\n"), b"_\r\n")
    w.set("tk", "1")
    eq(c.until(push("tk")), push("tk"))
    # Told once: a second write without a read in between is not announced.
    w.set("tk", "2")
    c.send("PING")
    eq(c.until(b"+PONG\r\n"), b"+PONG\r\n")
    c.send("GET", "tk")
    eq(c.until(b"\r\n2\r\n"), b"$1\r\n2\r\n")
    w.flushall()
    null = b">2\r\n$10\r\ninvalidate\r\n_\r\n"
    # Across agents the invalidation of `SET tk 2` travels after the write's reply and
    # may land after the GET above re-tracked tk: an extra `invalidate [tk]` first is
    # allowed (never a missing one).
    got = c.until(null)
    assert got in (null, push("tk") + null), got
    # In a cluster every agent flushes its own keys and tells every tracker: one null
    # per agent.
    assert set(c.quiet().split(null)) <= {b""}, "only nulls after a flush"
    # BCAST with a prefix and NOLOOP: others' writes under the prefix, not its own.
    c.send("CLIENT", "TRACKING", "off")
    eq(c.until(b"+OK\r\n"), b"+OK\r\n")
    c.send("CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "p:", "NOLOOP")
    eq(c.until(b"+OK\r\n"), b"+OK\r\n")
    w.set("p:1", "x")
    eq(c.until(push("p:1")), push("p:1"))
    c.send("SET", "p:2", "x")
    eq(c.until(b"+OK\r\n"), b"+OK\r\n")
    w.set("q", "1")
    w.set("p:3", "x")
    eq(c.until(push("p:3")), push("p:3"))
    c.send("CLIENT", "TRACKINGINFO")
    info = c.until(b"p:\r\n")
    assert b"bcast" in info and b"noloop" in info, info
    # OPTIN: only reads after CLIENT CACHING yes are remembered.
    c.send("CLIENT", "TRACKING", "off")
    c.until(b"+OK\r\n")
    c.send("CLIENT", "TRACKING", "on", "OPTIN")
    c.until(b"+OK\r\n")
    c.send("GET", "oi:1")
    c.until(b"_\r\n")
    c.send("CLIENT", "CACHING", "yes")
    c.until(b"+OK\r\n")
    c.send("GET", "oi:2")
    c.until(b"_\r\n")
    w.set("oi:1", "1")
    w.set("oi:2", "1")
    eq(c.until(push("oi:2")), push("oi:2"))
    c.send("PING")
    eq(c.until(b"+PONG\r\n"), b"+PONG\r\n")
    # A redirect target that goes away: the tracker is told.
    c.send("CLIENT", "TRACKING", "off")
    c.until(b"+OK\r\n")
    gone = Raw(port)
    gone_id = gone.client_id()
    c.send("CLIENT", "TRACKING", "on", "REDIRECT", gone_id)
    c.until(b"+OK\r\n")
    gone.s.close()
    # Until the server has seen it go.
    probe = redis.Redis(port=port)
    end = time.time() + DEADLINE
    while probe.client_list(client_id=[gone_id]) and time.time() < end:
        time.sleep(0.02)
    c.send("GET", "tk")
    c.until(b"_\r\n")
    w.set("tk", "3")
    broken = b">2\r\n$21\r\ntracking-redir-broken\r\n:%d\r\n" % gone_id
    eq(c.until(broken), broken)
    c.send("CLIENT", "TRACKINGINFO")
    info = c.until(b"prefixes\r\n*0\r\n")
    assert b"broken_redirect" in info, info
    w.flushall()
    print("RESP3: ok", flush=True)


def resp2(port: int, other: int) -> None:
    w = redis.Redis(port=other)
    sub = redis.Redis(port=port, protocol=2)
    ps = sub.pubsub()
    ps.subscribe("__redis__:invalidate")
    eq(ps.get_message(timeout=5)["type"], "subscribe")
    # A RESP2 client in subscribed mode cannot run CLIENT ID: CLIENT LIST finds it.
    tracker = redis.Redis(port=port, protocol=2, single_connection_client=True)
    ids = [c["id"] for c in sub.client_list() if c.get("sub") == "1"]
    eq(len(ids), 1)
    eq(tracker.client_tracking_on(clientid=int(ids[0])), b"OK")
    eq(tracker.client_getredir(), int(ids[0]))
    tracker.get("rk")
    w.set("rk", "1")
    end = time.time() + DEADLINE
    m = None
    while m is None and time.time() < end:
        m = ps.get_message(timeout=0.5)
    assert m is not None, "no invalidation message"
    eq((m["channel"], m["data"]), (b"__redis__:invalidate", [b"rk"]))
    eq(tracker.client_tracking_off(), b"OK")
    eq(tracker.client_getredir(), -1)
    ps.close()
    w.delete("rk")
    print("RESP2: ok", flush=True)


def errors(port: int) -> None:
    r = redis.Redis(port=port)
    for args, text in [
        (("on", "PREFIX", "a"), "PREFIX option requires BCAST mode to be enabled"),
        (("on", "OPTIN", "OPTOUT"), "You can't specify both OPTIN mode and OPTOUT mode"),
        (("on", "BCAST", "OPTIN"), "OPTIN and OPTOUT are not compatible with BCAST"),
        (("on", "REDIRECT", "999999"), "The client ID you want redirect to does not exist"),
        (("maybe",), "syntax error"),
        (("on", "BCAST", "PREFIX", "a", "PREFIX", "ab"),
         "Prefix 'a' overlaps with another provided prefix 'ab'. Prefixes for a single client must not overlap."),
    ]:
        try:
            r.execute_command("CLIENT", "TRACKING", *args)
            raise AssertionError(f"CLIENT TRACKING {args} succeeded")
        except redis.ResponseError as e:
            eq(str(e), text)
    try:
        r.execute_command("CLIENT", "CACHING", "yes")
        raise AssertionError("CLIENT CACHING succeeded")
    except redis.ResponseError as e:
        eq(str(e), "CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled")
    eq(r.client_getredir(), -1)
    info = r.client_trackinginfo()
    eq(info, ["flags", [b"off"], "redirect", -1, "prefixes", []])


def main() -> None:
    port = int(sys.argv[1])
    other = int(sys.argv[2]) if len(sys.argv) > 2 else port
    errors(port)
    resp3(port, other)
    resp2(port, other)


if __name__ == "__main__":
    main()
