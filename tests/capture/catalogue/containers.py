"""Catalogue cases: constants and containers (tuples, lists, dicts, sets: built,
concatenated, sliced, unpacked, compared, tested with `in`; their methods)."""
from .case import Case

CASES = [
    # ------------------------------------------------------------ tuples
    Case("tuple_concat_empty", """
def fn(x):
    t = () + (x,)
    t = t + (x * 2, 3)
    return t[0] + t[1] * t[2], len(t)
""", "T(3,)"),
    Case("tuple_repeat_and_slice", """
def fn(x):
    t = (1, 2, 3) * 2
    return x * sum(t[1:4]) + t[-1], t[::2], t[::-1]
""", "T(3,)"),
    Case("tuple_compare", """
def fn(x):
    a = (1, 2, 3)
    b = (1, 2, 4)
    return x * (a < b) + (a == (1, 2, 3)) - (a != b) * 2, a >= b
""", "T(2,)"),
    Case("tuple_in_and_index_count", """
def fn(x):
    t = (3, 1, 4, 1, 5)
    return x * t.index(4) + t.count(1), 5 in t, 9 not in t
""", "T(2,)"),
    Case("tuple_of_tensors_sliced", """
def fn(a, b, c):
    t = (a, b, c)
    head, tail = t[:1], t[1:]
    return head[0] + sum(tail[::-1], torch.zeros(2)), len(tail)
""", "T(2,), T(2,), T(2,)"),
    Case("tuple_unpack_nested", """
def fn(pair):
    (a, b), c = pair
    return a * b - c
""", "((T(3,), T(3,)), T(3,))"),
    Case("tuple_unpack_star_middle", """
def fn(x):
    first, *mid, last = (1, 2, 3, 4, 5)
    return x * first + sum(mid) - last, mid
""", "T(2,)"),
    Case("tuple_unpack_star_empty", """
def fn(x, y):
    a, *rest = (x, y)
    *init, z = [x]
    return a + rest[0], init, z
""", "T(2,), T(2,)"),
    Case("tuple_hash_as_dict_key", """
def fn(x):
    table = {(1, 2): 3.0, (2, 1): -1.0}
    return x * table[(1, 2)] + table[2, 1]
""", "T(3,)"),
    # ------------------------------------------------------------ lists
    Case("list_concat", """
def fn(a, b):
    xs = [a] + [b]
    xs += [a * b]
    return xs, len(xs)
""", "T(2,), T(2,)"),
    Case("list_repeat", """
def fn(x):
    xs = [x] * 3
    ys = 2 * [1.5]
    return xs[0] + xs[2] * ys[1], len(xs)
""", "T(2,)"),
    Case("list_append_extend_insert", """
def fn(x):
    xs = [x]
    xs.append(x + 1)
    xs.extend([x * 2, x * 3])
    xs.insert(0, x - 1)
    xs.insert(-1, x / 2)
    return xs
""", "T(2,)"),
    Case("list_pop_variants", """
def fn(x):
    xs = [x, x + 1, x + 2, x + 3]
    last = xs.pop()
    first = xs.pop(0)
    mid = xs.pop(-1)
    return last - first + mid, xs
""", "T(2,)"),
    Case("list_clear_and_reverse", """
def fn(x):
    xs = [x, x * 2, x * 3]
    xs.reverse()
    ys = list(xs)
    xs.clear()
    return ys, xs, len(xs)
""", "T(2,)"),
    Case("list_sort_python_values", """
def fn(x):
    ks = [3, 1, 2]
    ks.sort()
    names = ["b", "c", "a"]
    names.sort(reverse=True)
    return x * ks[0] + ks[-1], names
""", "T(2,)"),
    Case("list_sort_with_key", """
def fn(x):
    ks = [-3, 1, -2]
    ks.sort(key=abs)
    return x * ks[0], ks
""", "T(2,)"),
    Case("list_slice_assignment", """
def fn(x):
    xs = [x, x, x, x]
    xs[1:3] = [x * 2, x * 3, x * 4]
    xs[:1] = []
    return xs
""", "T(2,)"),
    Case("list_setitem_delitem", """
def fn(x):
    xs = [x, x + 1, x + 2]
    xs[1] = x * 10
    xs[-1] = xs[0] - 1
    del xs[0]
    return xs
""", "T(2,)"),
    Case("list_index_count_contains", """
def fn(x):
    xs = [4, 5, 6, 5]
    return x * xs.index(6) + xs.count(5), 5 in xs, 7 in xs
""", "T(2,)"),
    Case("list_copy_independent", """
def fn(x):
    xs = [1, 2]
    ys = xs.copy()
    ys.append(3)
    zs = xs[:]
    zs.append(4)
    return x * len(xs) + len(ys) + sum(zs), xs, ys
""", "T(2,)"),
    Case("list_compare", """
def fn(x):
    return x * ([1, 2] < [1, 3]) + ([1, 2] == [1, 2]), [3] > [2, 9]
""", "T(2,)"),
    Case("list_from_range_and_tuple", """
def fn(x):
    a = list(range(4))
    b = list((x, x * 2))
    return b[1] + a[-1], a
""", "T(2,)"),
    Case("list_negative_step_slice", """
def fn(x):
    xs = [x * i for i in range(5)]
    return xs[::-2], xs[3:0:-1]
""", "T(2,)"),
    Case("list_of_lists_nested_mutation", """
def fn(x):
    grid = [[x], [x * 2]]
    grid[0].append(x * 3)
    grid[1][0] = grid[1][0] + 1
    return grid
""", "T(2,)"),
    # ------------------------------------------------------------ dicts
    Case("dict_get_with_default", """
def fn(x):
    d = {"a": 1.0, "b": 2.0}
    return x * d.get("a") + d.get("z", 5.0), d.get("q")
""", "T(2,)"),
    Case("dict_pop_and_default", """
def fn(x):
    d = {"a": x, "b": x * 2}
    v = d.pop("a")
    w = d.pop("missing", 3.0)
    return v + w, d
""", "T(2,)"),
    Case("dict_update_and_copy", """
def fn(x):
    d = {"a": x}
    e = d.copy()
    e.update({"b": x * 2})
    e.update(c=x * 3)
    return d, e
""", "T(2,)"),
    Case("dict_items_keys_values", """
def fn(x):
    d = {"a": 1, "b": 2, "c": 3}
    total = 0
    for k, v in d.items():
        total += v
    return x * total, list(d.keys()), sum(d.values())
""", "T(2,)"),
    Case("dict_setdefault", """
def fn(x):
    d = {}
    d.setdefault("a", []).append(x)
    d.setdefault("a", []).append(x * 2)
    v = d.setdefault("b", 7)
    return d, x * v
""", "T(2,)"),
    Case("dict_constructor_kwargs_pairs", """
def fn(x):
    a = dict(w=x, b=2)
    b = dict([("k", x * 2), ("j", 1)])
    return a["w"] * a["b"] + b["k"], sorted(b)
""", "T(2,)"),
    Case("dict_zip", """
def fn(x, y):
    d = dict(zip(["x", "y"], [x, y]))
    return d["x"] - d["y"], list(d)
""", "T(2,), T(2,)"),
    Case("dict_in_and_len", """
def fn(x):
    d = {"a": x, "b": 1}
    return x * len(d) if "a" in d and "c" not in d else x
""", "T(2,)"),
    Case("dict_merge_operator", """
def fn(x):
    a = {"p": x, "q": 1}
    b = {"q": 2, "r": x * 2}
    c = a | b
    a |= {"s": 3}
    return c, a
""", "T(2,)"),
    Case("dict_unpack_in_literal", """
def fn(x):
    base = {"a": x}
    return {**base, "b": x * 2, **{"c": 3}}
""", "T(2,)"),
    Case("dict_del_and_iteration_order", """
def fn(x):
    d = {"a": 1, "b": 2, "c": 3}
    del d["b"]
    d["b"] = 4
    return x * d["b"], list(d)
""", "T(2,)"),
    Case("dict_comprehension_filtering", """
def fn(x):
    d = {k: x * v for k, v in zip("abcd", range(4)) if v % 2}
    return d
""", "T(2,)"),
    Case("dict_of_tensor_input_items", """
def fn(d):
    keys = sorted(d.keys())
    return [d[k] * i for i, k in enumerate(keys)], dict(d)
""", "{'b': T(2,), 'a': T(2,)}"),
    Case("dict_fromkeys", """
def fn(x):
    d = dict.fromkeys(["a", "b"], 2)
    return x * d["a"] + d["b"], d
""", "T(2,)"),
    # ------------------------------------------------------------ sets
    Case("set_build_and_in", """
def fn(x):
    s = {1, 2, 3}
    return x * (2 in s) + len(s), 5 in s
""", "T(2,)"),
    Case("set_operations", """
def fn(x):
    a = {1, 2, 3}
    b = {2, 3, 4}
    return x * len(a & b) + len(a | b), sorted(a - b), sorted(a ^ b)
""", "T(2,)"),
    Case("set_add_discard_constructor", """
def fn(x):
    s = set([1, 2])
    s.add(3)
    s.discard(1)
    s.add(2)
    return x * len(s), sorted(s)
""", "T(2,)"),
    Case("set_of_strings_membership", """
def fn(x):
    modes = set(("train", "eval"))
    return x * 2 if "train" in modes else x, len(modes)
""", "T(2,)"),
    # ------------------------------------------------------------ conversions, iteration
    Case("tuple_list_set_conversions", """
def fn(x):
    a = tuple([1, 2, 2])
    b = list(a)
    c = set(b)
    return x * len(c) + sum(a), a, b
""", "T(2,)"),
    Case("reversed_and_sorted_values", """
def fn(x):
    order = sorted([3, 1, 2], reverse=True)
    back = list(reversed([1, 2, 3]))
    return x * order[0] + back[0], order, back
""", "T(2,)"),
    Case("iter_next_on_list", """
def fn(xs):
    it = iter(xs)
    a = next(it)
    b = next(it)
    c = next(it, None)
    return a + b, c is None
""", "[T(2,), T(2,)]"),
    Case("sorted_with_key_lambda", """
def fn(x):
    pairs = sorted([(2, "b"), (1, "z"), (3, "a")], key=lambda p: p[1])
    return x * pairs[0][0], pairs
""", "T(2,)"),
    Case("nested_container_equality", """
def fn(x):
    a = {"k": [1, (2, 3)]}
    b = {"k": [1, (2, 3)]}
    return x * (a == b), a != {"k": []}
""", "T(2,)"),
    Case("unpack_dict_into_call", """
def f(a, b=0, **rest):
    return a * b + len(rest)
def fn(x):
    kw = {"b": 3, "c": 1}
    return f(x, **kw), f(*[x], **{"b": 2})
""", "T(2,)"),
    Case("unpack_list_into_call", """
def f(a, b, c):
    return a + b * c
def fn(x):
    args = [x, 2]
    return f(*args, 3), f(*(x, x), *[x])
""", "T(2,)"),
]
