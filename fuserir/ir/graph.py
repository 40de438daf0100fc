"""A small directed graph: the fusion's dataflow graph, and the dependence graphs lowering
sorts (lowering.passes.loop_nests).

    g = DiGraph(); g.add_node(n, serial=0); g.add_edge(u, v)
    g.nodes[n]["serial"]; n in g; g.successors(n); g.predecessors(n); g.out_degree(n)
    topological_order(g, key)     ancestors(g, n)     has_path(g, u, v)     is_acyclic(g)

It keeps nodes and each node's successors and predecessors in insertion order, so every
walk is deterministic. The method names are networkx's, whose DiGraph the fusion used to
hold: importing networkx cost more than a first compile's lowering (its backends scan the
installed packages), for the handful of operations above. topological_order is
networkx's lexicographical_topological_sort: Kahn's algorithm taking, among the nodes
whose predecessors are all out, the one of smallest key (then of earliest insertion).
"""

import heapq


class CycleError(ValueError):
    """topological_order of a graph with a cycle."""


class _Nodes:
    """g.nodes: iterates the nodes in insertion order; g.nodes[n] is n's attribute dict."""

    __slots__ = ("_attrs",)

    def __init__(self, attrs):
        self._attrs = attrs

    def __iter__(self):
        return iter(self._attrs)

    def __len__(self):
        return len(self._attrs)

    def __contains__(self, node):
        return node in self._attrs

    def __getitem__(self, node):
        return self._attrs[node]


class DiGraph:
    def __init__(self):
        self._attrs = {}        # node -> attributes (insertion order: the nodes' order)
        self._succ = {}         # node -> {successor: None} (an ordered set)
        self._pred = {}         # node -> {predecessor: None}

    @property
    def nodes(self):
        return _Nodes(self._attrs)

    def __contains__(self, node):
        return node in self._attrs

    def __iter__(self):
        return iter(self._attrs)

    def __len__(self):
        return len(self._attrs)

    def add_node(self, node, **attrs):
        if node not in self._attrs:
            self._attrs[node] = {}
            self._succ[node] = {}
            self._pred[node] = {}
        self._attrs[node].update(attrs)

    def add_nodes_from(self, nodes):
        for node in nodes:
            self.add_node(node)

    def add_edge(self, u, v):
        self.add_node(u)
        self.add_node(v)
        self._succ[u][v] = None
        self._pred[v][u] = None

    def add_edges_from(self, edges):
        for u, v in edges:
            self.add_edge(u, v)

    def has_edge(self, u, v):
        return u in self._succ and v in self._succ[u]

    def remove_edge(self, u, v):
        del self._succ[u][v]
        del self._pred[v][u]

    def remove_node(self, node):
        for v in self._succ.pop(node):
            del self._pred[v][node]
        for u in self._pred.pop(node):
            del self._succ[u][node]
        del self._attrs[node]

    def successors(self, node):
        return iter(self._succ[node])

    def predecessors(self, node):
        return iter(self._pred[node])

    def out_degree(self, node):
        return len(self._succ[node])

    def in_degree(self, node):
        return len(self._pred[node])

    def edges(self):
        return [(u, v) for u, vs in self._succ.items() for v in vs]


def topological_order(graph, key):
    """The nodes, each after its predecessors, the smallest `key(node)` first among those
    ready (ties: insertion order). Raises CycleError where a cycle leaves nodes out."""
    index = {n: i for i, n in enumerate(graph)}
    waiting = {n: graph.in_degree(n) for n in graph if graph.in_degree(n)}
    ready = [(key(n), index[n], n) for n in graph if not graph.in_degree(n)]
    heapq.heapify(ready)
    order = []
    while ready:
        node = heapq.heappop(ready)[2]
        order.append(node)
        for child in graph.successors(node):
            waiting[child] -= 1
            if not waiting[child]:
                del waiting[child]
                heapq.heappush(ready, (key(child), index[child], child))
    if waiting:
        raise CycleError(f"the graph has a cycle through {len(waiting)} nodes")
    return order


def ancestors(graph, node):
    """Every node with a path to `node` (not `node` itself, unless on a cycle)."""
    seen, stack = set(), list(graph.predecessors(node))
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(graph.predecessors(n))
    return seen


def has_path(graph, source, target):
    """Is there a path from `source` to `target` (a node reaches itself)?"""
    if source is target:
        return True
    seen, stack = {source}, [source]
    while stack:
        for n in graph.successors(stack.pop()):
            if n is target:
                return True
            if n not in seen:
                seen.add(n)
                stack.append(n)
    return False


def is_acyclic(graph):
    try:
        topological_order(graph, key=lambda n: 0)
    except CycleError:
        return False
    return True
