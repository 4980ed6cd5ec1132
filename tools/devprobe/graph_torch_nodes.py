# Reads the kernel nodes of a graph captured with torch.cuda.graph (func, kern,
# ctx set?) through libcuda, for docs/device-facts.md "CUDA graphs and green
# contexts". Run on a machine with a GPU and torch: python3 graph_torch_nodes.py
import ctypes, torch, json
cu = ctypes.CDLL("libcuda.so.1")
x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
w = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    for _ in range(2): y = torch.relu(x @ w).sum()
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph(keep_graph=True)
with torch.cuda.graph(g):
    y = torch.softmax(x @ w, -1) + 1
raw = g.raw_cuda_graph()
n = ctypes.c_size_t(0)
cu.cuGraphGetNodes(ctypes.c_void_p(raw), None, ctypes.byref(n))
nodes = (ctypes.c_void_p * n.value)()
cu.cuGraphGetNodes(ctypes.c_void_p(raw), nodes, ctypes.byref(n))
class P(ctypes.Structure):
    _fields_ = [("func", ctypes.c_void_p)] + [(k, ctypes.c_uint) for k in "gx gy gz bx by bz smem".split()] + [("params", ctypes.c_void_p), ("extra", ctypes.c_void_p), ("kern", ctypes.c_void_p), ("ctx", ctypes.c_void_p)]
out = []
for i in range(n.value):
    t = ctypes.c_int(); cu.cuGraphNodeGetType(ctypes.c_void_p(nodes[i]), ctypes.byref(t))
    if t.value != 0: out.append({"type": t.value}); continue
    p = P(); r = cu.cuGraphKernelNodeGetParams_v2(ctypes.c_void_p(nodes[i]), ctypes.byref(p))
    out.append({"type": 0, "r": r, "func": bool(p.func), "kern": bool(p.kern), "ctx": bool(p.ctx)})
print(json.dumps({"probe": "torch_nodes", "torch": torch.__version__, "nodes": out}))
