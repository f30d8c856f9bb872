"""Maximum flow and a minimum cut (Dinic's algorithm), for the partitioner.

Capacities are integers (bytes), with INFINITE standing for an edge no cut may cross;
the arithmetic stays exact. Dinic: repeat { label vertices by their BFS distance from
the source in the residual graph; push blocking flow along edges that go one level
down } until the sink is unreachable. The vertices still reachable from the source then
form the source side of a minimum cut."""
from __future__ import annotations

from collections import deque

INFINITE = float("inf")


class FlowNetwork:
    def __init__(self):
        self.index = {}      # vertex key -> int
        self.head = []       # int -> list of edge ids leaving it
        self.to = []         # edge id -> target vertex; edge ^ 1 is its reverse
        self.cap = []        # edge id -> residual capacity

    def vertex(self, key) -> int:
        v = self.index.get(key)
        if v is None:
            v = self.index[key] = len(self.head)
            self.head.append([])
        return v

    def add_edge(self, u, v, capacity):
        """An edge u -> v (vertex keys) of the given capacity (int or INFINITE)."""
        a, b = self.vertex(u), self.vertex(v)
        self.head[a].append(len(self.to))
        self.to.append(b)
        self.cap.append(capacity)
        self.head[b].append(len(self.to))
        self.to.append(a)
        self.cap.append(0)

    def _levels(self, s, t):
        level = [-1] * len(self.head)
        level[s] = 0
        queue = deque([s])
        while queue:
            u = queue.popleft()
            for e in self.head[u]:
                v = self.to[e]
                if self.cap[e] > 0 and level[v] < 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level if level[t] >= 0 else None

    def _augment(self, s, t, level, it):
        """One augmenting path along level edges (iteratively); its flow, or 0."""
        path = []            # edge ids from s
        u = s
        while True:
            if u == t:
                flow = min(self.cap[e] for e in path)
                for e in path:
                    self.cap[e] -= flow
                    self.cap[e ^ 1] += flow
                return flow
            edges = self.head[u]
            while it[u] < len(edges):
                e = edges[it[u]]
                v = self.to[e]
                if self.cap[e] > 0 and level[v] == level[u] + 1:
                    break
                it[u] += 1
            else:
                # dead end: no more paths through u this phase
                if not path:
                    return 0
                level[u] = -1
                e = path.pop()
                u = self.to[e ^ 1]
                it[u] += 1
                continue
            path.append(e)
            u = v

    def max_flow(self, source, sink):
        """The maximum flow from source to sink (vertex keys); INFINITE when an
        uncuttable path joins them."""
        s, t = self.vertex(source), self.vertex(sink)
        total = 0
        while True:
            level = self._levels(s, t)
            if level is None:
                return total
            it = [0] * len(self.head)
            while True:
                f = self._augment(s, t, level, it)
                if not f:
                    break
                if f == INFINITE:
                    return INFINITE
                total += f

    def source_side(self, source):
        """Vertex keys reachable from source in the residual graph (after max_flow):
        the source side of a minimum cut."""
        keys = list(self.index)
        s = self.vertex(source)
        seen = {s}
        stack = [s]
        while stack:
            u = stack.pop()
            for e in self.head[u]:
                v = self.to[e]
                if self.cap[e] > 0 and v not in seen:
                    seen.add(v)
                    stack.append(v)
        return {keys[v] for v in seen}
