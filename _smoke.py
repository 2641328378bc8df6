from evstore import Store
from evstore._backends import MemoryStore
from tests.helpers import CountingStore, msg
import time
for n in (300, 5000):
    inner = MemoryStore()
    store = Store(inner, root="r")
    w = store.open("s", create=True)
    for i in range(n): w.append(msg(f"m{i}"))
    early = store.tree_head("s", size=200)
    mid = store.tree_head("s", size=256)
    c = CountingStore(inner); cs = Store(c, root="r")
    t=time.time()
    for head in (early, mid):
        c.reset()
        r = cs.verify_tree("s", head)
        print(n, head.size, r.stored, r.fallback, r.tree_head.size, dict(c.counts), c.keys[:8])
    c.reset(); full = cs.verify_tree("s", early, full=True); print("full", full.tree_head.size, c.total)
    c.reset(); ch = cs.tree_head("s", checkpoint=True); print("cp", ch.size, c.total, ch == store.tree_head("s", size=ch.size))
    c.reset(); p = cs.prove("s", 7, checkpoint=True); print("prove", p.size, c.total)
    c.reset(); p = cs.prove_consistency("s", 100, checkpoint=True); print("cons", p.new_size, c.total)
