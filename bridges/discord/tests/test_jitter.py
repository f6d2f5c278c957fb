from tonearm_discord.jitter import SILENCE, JitterBuffer


def packets(n: int, start: int = 0) -> list[bytes]:
    return [bytes([0xFC, i % 256, i // 256]) for i in range(start, start + n)]


def test_plays_only_once_the_start_threshold_has_arrived():
    buffer = JitterBuffer(start_packets=3, cap_packets=10)
    first = packets(3)
    buffer.push(first[0])
    buffer.push(first[1])
    assert buffer.read() == SILENCE
    buffer.push(first[2])
    assert [buffer.read() for _ in range(3)] == first


def test_an_underrun_gives_silence_and_waits_for_the_threshold_again():
    buffer = JitterBuffer(start_packets=3, cap_packets=10)
    for packet in packets(3):
        buffer.push(packet)
    for _ in range(3):
        buffer.read()
    assert buffer.read() == SILENCE
    assert buffer.stats.underruns == 1
    later = packets(2, start=10)
    for packet in later:
        buffer.push(packet)
    assert buffer.read() == SILENCE, "one packet after an underrun is not enough to start again"
    buffer.push(packets(1, start=12)[0])
    assert buffer.read() == later[0]


def test_a_backlog_past_the_cap_is_shed_to_the_newest():
    buffer = JitterBuffer(start_packets=3, cap_packets=10)
    burst = packets(11)
    for packet in burst:
        buffer.push(packet)
    assert buffer.waiting == 3
    assert buffer.stats.shed == 8
    assert [buffer.read() for _ in range(3)] == burst[-3:]


def test_clear_forgets_what_waits():
    buffer = JitterBuffer()
    for packet in packets(5):
        buffer.push(packet)
    buffer.clear()
    assert buffer.waiting == 0
    assert buffer.read() == SILENCE
