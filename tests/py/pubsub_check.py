"""Pub/sub through redis-py, unmodified: channel, pattern and shard-channel subscribers
(PubSub objects, RESP2 and RESP3) on one agent and, with two ports, on the other agent
of a proxy-mode cluster; every message delivered once and in order to each; PUBLISH
counting every receiver on every agent; PUBSUB CHANNELS / NUMSUB / NUMPAT /
SHARDCHANNELS / SHARDNUMSUB; unsubscribing; a subscriber that stops reading is
disconnected at `client-output-buffer-limit pubsub` while the server goes on.

    python3 pubsub_check.py PORT [OTHER_PORT]

Prints "RESP2: ok" and "RESP3: ok" (and "SLOW: ok"). Written and checked against
redis-server 7.0 first (one port).
"""
import socket
import sys
import time

import redis


def eq(got, want):
    assert got == want, f"got {got!r}, want {want!r}"


def next_message(p, timeout=5.0):
    """The next message (not a confirmation) a PubSub object receives."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        m = p.get_message(ignore_subscribe_messages=True, timeout=0.2)
        if m is not None:
            return m
    raise AssertionError("no message within the timeout")


def drain_confirmations(p, n):
    got = []
    deadline = time.time() + 5
    while len(got) < n and time.time() < deadline:
        m = p.get_message(timeout=0.2)
        if m is not None:
            got.append(m)
    eq(len(got), n)
    return got


def check(port: int, other: int, proto: int) -> None:
    pub = redis.Redis(port=port, protocol=proto, decode_responses=True)
    here = redis.Redis(port=port, protocol=proto, decode_responses=True).pubsub()
    there = redis.Redis(port=other, protocol=proto, decode_responses=True).pubsub()
    pattern = redis.Redis(port=other, protocol=proto, decode_responses=True).pubsub()
    shard = redis.Redis(port=other, protocol=proto, decode_responses=True).pubsub()
    chan = f"news{proto}"
    here.subscribe(chan)
    there.subscribe(chan, f"other{proto}")
    pattern.psubscribe(f"new*{proto}")
    shard.ssubscribe(f"shard{proto}")
    confirmations = drain_confirmations(there, 2)
    eq([c["type"] for c in confirmations], ["subscribe", "subscribe"])
    eq([c["data"] for c in confirmations], [1, 2])
    drain_confirmations(here, 1)
    eq(drain_confirmations(pattern, 1)[0]["type"], "psubscribe")
    eq(drain_confirmations(shard, 1)[0]["type"], "ssubscribe")

    # Counted on every agent.
    eq(pub.pubsub_numsub(chan, f"other{proto}", "nobody"), [(chan, 2), (f"other{proto}", 1), ("nobody", 0)])
    assert pub.pubsub_numpat() >= 1
    channels = pub.pubsub_channels()
    assert chan in channels and f"other{proto}" in channels, channels
    eq(pub.pubsub_channels(f"other{proto}"), [f"other{proto}"])
    eq(pub.execute_command("PUBSUB", "SHARDCHANNELS"), [f"shard{proto}"])
    eq(pub.execute_command("PUBSUB", "SHARDNUMSUB", f"shard{proto}"), [f"shard{proto}", 1])

    # Every message once, in order, to each subscriber; PUBLISH counts them all.
    n = 200
    for i in range(n):
        eq(pub.publish(chan, f"m{i}"), 3)
    for sub in (here, there):
        for i in range(n):
            m = next_message(sub)
            eq((m["type"], m["channel"], m["data"]), ("message", chan, f"m{i}"))
    for i in range(n):
        m = next_message(pattern)
        eq((m["type"], m["pattern"], m["channel"], m["data"]), ("pmessage", f"new*{proto}", chan, f"m{i}"))
    eq(pub.publish("nobody", "x"), 0)
    eq(pub.spublish(f"shard{proto}", "s1"), 1)
    m = next_message(shard)
    eq((m["type"], m["channel"], m["data"]), ("smessage", f"shard{proto}", "s1"))

    # Unsubscribed, a client receives nothing more and the counts drop.
    there.unsubscribe(chan)
    eq(drain_confirmations(there, 1)[0]["type"], "unsubscribe")
    eq(pub.publish(chan, "late"), 2)
    m = next_message(here)
    eq(m["data"], "late")
    eq(next_message(pattern)["data"], "late")
    eq(pub.publish(f"other{proto}", "o"), 1)
    eq(next_message(there)["data"], "o")
    for p in (here, there, pattern, shard):
        p.close()
    # The server learns of each close on its own: wait for the channel's and the
    # pattern's counts alike (CI once read NUMPAT before the pattern client's close).
    deadline = time.time() + 5
    while pub.pubsub_numsub(chan)[0][1] != 0 or pub.pubsub_numpat() != 0:
        assert time.time() < deadline, "closed subscribers still counted"
        time.sleep(0.05)
    eq(pub.pubsub_numpat(), 0)
    print(f"RESP{proto}: ok")


def slow_subscriber(port: int, other: int) -> None:
    """A subscriber that never reads is disconnected once its messages pass the
    pubsub hard limit (1 MB here); the server goes on."""
    admin = redis.Redis(port=port, decode_responses=True)
    old = admin.config_get("client-output-buffer-limit")["client-output-buffer-limit"]
    admin.config_set("client-output-buffer-limit", "pubsub 1mb 0 0")
    try:
        sock = socket.create_connection(("127.0.0.1", other))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(b"*2\r\n$9\r\nSUBSCRIBE\r\n$4\r\nslow\r\n")
        deadline = time.time() + 5
        while admin.pubsub_numsub("slow")[0][1] != 1:
            assert time.time() < deadline
            time.sleep(0.02)
        payload = "x" * 65536
        deadline = time.time() + 30
        sent = 0
        while admin.pubsub_numsub("slow")[0][1] != 0:
            assert time.time() < deadline, f"a subscriber that does not read was kept ({sent} sent)"
            admin.publish("slow", payload)
            sent += 1
        assert sent * len(payload) > 1 << 20, sent
        eq(admin.ping(), True)
        sock.close()
    finally:
        admin.config_set("client-output-buffer-limit", old)
    print("SLOW: ok")


def main() -> None:
    port = int(sys.argv[1])
    other = int(sys.argv[2]) if len(sys.argv) > 2 else port
    for proto in (2, 3):
        check(port, other, proto)
    slow_subscriber(port, other)


if __name__ == "__main__":
    main()
