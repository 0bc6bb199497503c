"""Oracles for the schedule tests, written apart from remat.schedules: an exhaustive
search for the least time of a tiny chain under a byte budget."""

import heapq


def search(costs, memory, persistent):
    """Least time over all valid schedules of a tiny chain (Dijkstra over executor states).

    A state of the search is (current position or -1, stored positions, taped
    steps, next step to reverse, forward sweep over).  Moves are one-step
    Advance and Tape, Snapshot, Restore, Free, EndForward and Reverse; the
    bytes held (stored states + tapes) must stay within ``memory``.  With
    ``persistent``, a stored x_p may be released only once step p is taped, or
    in the move that tapes step p from it.  Returns None if nothing fits.
    """
    f, r = costs.forward_time, costs.reverse_time
    s, t = costs.state_bytes, costs.tape_bytes
    n = costs.steps
    start = (0, frozenset(), frozenset(), n - 1, False)
    best = {start: 0}
    heap = [(0, 0, start)]
    tie = 1
    while heap:
        time, _, key = heapq.heappop(heap)
        if best[key] != time:
            continue
        current, stored, taped, nxt, over = key
        if nxt < 0:
            return time
        moves = []
        if 0 <= current < n:
            moves.append((f[current], (current + 1, stored, taped, nxt, over)))
            if current not in taped and current <= nxt:
                moves.append((r[current], (current + 1, stored, taped | {current}, nxt, over)))
                if current in stored:  # tape it and release x_current together
                    release = stored - {current}
                    moves.append((r[current], (current + 1, release, taped | {current}, nxt, over)))
        if current >= 0 and current not in stored:
            moves.append((0, (current, stored | {current}, taped, nxt, over)))
        for p in stored:
            moves.append((0, (p, stored, taped, nxt, over)))
            if not persistent or p > nxt or p in taped:
                moves.append((0, (current, stored - {p}, taped, nxt, over)))
        if not over and current == n and n - 1 in taped:
            moves.append((0, (current, stored, taped, nxt, True)))
        if over and nxt in taped:
            moves.append((0, (-1, stored, taped - {nxt}, nxt - 1, over)))
        for cost, new in moves:
            held = sum(s[p] for p in new[1]) + sum(t[i] for i in new[2])
            if held <= memory and time + cost < best.get(new, float("inf")):
                best[new] = time + cost
                heapq.heappush(heap, (time + cost, tie, new))
                tie += 1
    return None
