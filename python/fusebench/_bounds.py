"""The fp64 run with a running error bound, for any PyTorch function (docs/conditioned-error.md).

`BoundMode` is a TorchDispatchMode active during the fp64 reference run. For every ATen op it
computes the op in float64, as the reference does, and beside each floating result a bound E on
the error that computing the function op by op, each op's result rounded to the dtype that eager
computes it in, may carry to first order (Higham's running error analysis, as the C++ reference
executor carries it). The dtype eager would use is tracked per tensor ("virtual dtype"): the fp64
run maps the model's dtype to float64, so a float64 request stands for the model's dtype, and an
explicit cast the model writes (`.float()`, `softmax(..., dtype=torch.float32)`) is kept in float64
and counted as a rounding to its target where the target is coarser.

Rules per op class (u = unit roundoff of the op's virtual dtype):
  elementwise    |df/dx| E_x + ... + u|z|  (derivatives written out per op; exact ops such as
                 neg, abs, relu, where, masked_fill, max/min add no rounding; other ops tagged
                 pointwise use a central difference in float64 for their derivatives)
  data movement  the op applied to the bounds (view, permute, slice, cat, gather, embedding, ...)
  matmul, conv   f(|A|, E_B) + f(E_A, |B|) + (u + c(K) u_acc) f(|A|, |B|) (bias and addmm's C
                 added; c(K) u_acc the accumulation of K products, _accumulation)
  reductions     sum / mean / cumsum: sum(E) + (u + c(K) u_acc) sum(|x|), K the terms summed per
                 element; max / min: the bound at the argmax; var / std: carried 2|x - m| E / n,
                 own (5 u + c(K) u_acc) var
  softmax, log_softmax, layer_norm: the table of docs/conditioned-error.md (their sums of K terms
                 count c(K) u_acc likewise)
  attention      decomposed into matmul, scaling, mask, softmax, matmul and bounded by those rules;
                 its backward kernels likewise (dV = p^T dO, dS = p (dO V^T - rowsum(dO O)), ...)
  other ops      their decomposition (torch._decomp) is run under the mode when there is one;
                 an op with neither a rule nor a decomposition is *unknown*: it is named, and its
                 floating outputs carry a NaN bound, which propagates, so that every output that
                 depends on it falls back to ULP error.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.weak import WeakIdKeyDictionary

aten = torch.ops.aten
F64 = torch.float64

UNIT_ROUNDOFF = {
    torch.float16: 2.0**-11,
    torch.bfloat16: 2.0**-8,
    torch.float32: 2.0**-24,
    torch.float64: 2.0**-53,
}
# half the smallest subnormal of each format: the floor of the conditioned error's denominator
UNDERFLOW = {torch.float16: 2.0**-25, torch.bfloat16: 2.0**-134, torch.float32: 2.0**-150, torch.float64: 2.0**-1075}


def conditioning_floor(bound: torch.Tensor | None, dtype: torch.dtype) -> np.ndarray | None:
    """What the conditioned error |y - fp64| divides by, per element (flattened, float64): the
    bound, never below half the dtype's smallest subnormal (a bound of 0 where fp64 and the dtype
    agree exactly); None where a value has no bound (NaN: it depends on an op without a rule)."""
    if bound is None:
        return None
    b = bound.detach().to(torch.float64).cpu().contiguous().numpy().reshape(-1)
    if np.isnan(b).any():
        return None
    return np.maximum(b, UNDERFLOW.get(dtype, 2.0**-1075))


def unit_roundoff(dtype: torch.dtype) -> float:
    return UNIT_ROUNDOFF.get(dtype, 0.0)


def _coarser(a: torch.dtype, b: torch.dtype) -> bool:
    """True when rounding a value of dtype b to dtype a loses precision."""
    return unit_roundoff(a) > unit_roundoff(b) or (a == torch.float16 and b == torch.bfloat16)


def _floating(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.is_floating_point()


def _tree_map(value: Any, fn) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_tree_map(v, fn) for v in value)
    if isinstance(value, dict):
        return {k: _tree_map(v, fn) for k, v in value.items()}
    return value


def _tensors(value: Any) -> list[torch.Tensor]:
    out: list[torch.Tensor] = []
    _tree_map(value, lambda t: out.append(t) or t)
    return out


# ---- op classes
def _packets(*names: str) -> set:
    out = set()
    for name in names:
        packet = getattr(aten, name, None)
        if packet is not None:
            out.add(packet)
    return out


DATA_MOVEMENT = _packets(
    "view", "_unsafe_view", "reshape", "_reshape_alias", "expand", "permute", "transpose", "t", "unsqueeze",
    "squeeze", "slice", "select", "split", "split_with_sizes", "unbind", "chunk", "cat", "stack", "clone",
    "contiguous", "alias", "detach", "as_strided", "index", "index_select", "gather", "embedding", "repeat",
    "flatten", "narrow", "roll", "flip", "lift_fresh", "lift_fresh_copy", "constant_pad_nd", "unfold",
    "diagonal", "movedim", "expand_as", "view_as", "tril", "triu", "pixel_shuffle", "pixel_unshuffle",
    "upsample_nearest2d", "_unsafe_index", "unflatten", "squeeze_copy", "unsqueeze_copy", "view_copy",
    "permute_copy", "expand_copy", "t_copy", "transpose_copy", "slice_copy", "select_copy",
    "repeat_interleave", "index_put", "scatter", "masked_scatter", "select_scatter", "slice_scatter",
)  # fmt: skip
# arguments replaced when the op is applied to the bounds (a pad value is an exact constant)
_BOUND_ARGS = {"constant_pad_nd": {2: 0.0}}
# exact elementwise ops: no rounding of their own, derivatives 0 / +-1 (or selection)
EXACT = _packets(
    "neg", "abs", "relu", "where", "masked_fill", "clamp", "clamp_min", "clamp_max", "maximum", "minimum",
    "fmax", "fmin", "hardtanh", "threshold", "sign", "floor", "ceil", "trunc", "round", "copysign",
    "positive", "fill", "threshold_backward",
)  # fmt: skip
BILINEAR = _packets("mm", "bmm", "matmul", "dot", "mv", "vdot", "_convolution", "convolution")
FACTORY = _packets(
    "zeros", "ones", "full", "empty", "arange", "linspace", "scalar_tensor", "empty_strided", "new_zeros",
    "new_ones", "new_full", "new_empty", "new_empty_strided", "rand", "randn", "randint", "tensor", "eye",
    "zeros_like", "ones_like", "full_like", "empty_like", "rand_like", "randn_like",
)  # fmt: skip


def _abs(x):
    return x.abs() if isinstance(x, torch.Tensor) else abs(x)


class BoundMode(TorchDispatchMode):
    """Computes the bound beside every floating tensor of an fp64 run (see the module's docstring).

    model_dtype: the dtype float64 stands for (the model's dtype in eager). register(t, dtype)
    marks an input or parameter: exact (bound 0) and of that dtype in eager."""

    def __init__(self, model_dtype: torch.dtype):
        super().__init__()
        self.model_dtype = model_dtype
        self.info = WeakIdKeyDictionary()  # tensor -> (bound tensor or None for 0, virtual dtype)
        self.unknown: Counter = Counter()  # ops without a rule or a decomposition
        self.decomposed: Counter = Counter()  # ops bounded through their decomposition
        self.ops = 0

    # ---- bookkeeping
    def register(self, t: torch.Tensor, dtype: torch.dtype) -> None:
        if _floating(t):
            self.info[t] = (None, dtype)

    def bound(self, t: torch.Tensor) -> torch.Tensor:
        """The bound of t (zeros where nothing is recorded: inputs, parameters and constants are exact)."""
        b = self.info.get(t, (None, None))[0]
        return torch.zeros_like(t, dtype=F64) if b is None else b

    def vdtype(self, t: torch.Tensor) -> torch.dtype:
        v = self.info.get(t, (None, None))[1]
        if v is not None:
            return v
        return self.model_dtype if t.dtype == F64 else t.dtype

    def _set(self, t: torch.Tensor, b: torch.Tensor | None, vdtype: torch.dtype) -> None:
        if _floating(t):
            if b is not None and b.shape != t.shape:
                b = b.expand(t.shape) if b.dim() <= t.dim() else b.reshape(t.shape)
            self.info[t] = (b, vdtype)

    def _map_dtype(self, dtype: torch.dtype | None) -> tuple[torch.dtype | None, torch.dtype | None]:
        """(actual dtype to compute in, virtual dtype) for a dtype the model asked for."""
        if dtype is None or not dtype.is_floating_point:
            return dtype, None
        if dtype == F64:
            return F64, self.model_dtype
        return F64, dtype

    def _result_vdtype(self, args, kwargs) -> torch.dtype:
        tensors = [t for t in _tensors((args, kwargs)) if _floating(t)]
        if not tensors:
            return self.model_dtype
        dims = [t for t in tensors if t.dim() > 0] or tensors
        out = self.vdtype(dims[0])
        for t in dims[1:]:
            out = torch.promote_types(out, self.vdtype(t))
        return out

    # ---- dispatch
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        self.ops += 1
        packet = func.overloadpacket
        explicit_vdtype = None
        if "dtype" in kwargs and isinstance(kwargs["dtype"], torch.dtype):
            kwargs["dtype"], explicit_vdtype = self._map_dtype(kwargs["dtype"])
        if packet in (aten._to_copy, aten.to) or packet is getattr(aten, "_to_copy", None):
            return self._cast(func, args, kwargs, explicit_vdtype)
        if packet in FACTORY:
            out = func(*args, **kwargs)
            for t in _tensors(out):
                self._set(t, None, explicit_vdtype or (self.model_dtype if t.dtype == F64 else t.dtype))
            return out
        rule = _RULES.get(packet)
        if rule is not None:
            try:
                return rule(self, func, args, kwargs, explicit_vdtype)
            except NoRule as why:
                return self._unknown(func, func(*args, **kwargs), explicit_vdtype, args, kwargs, str(why))
            except Exception as error:
                if "fusebench:" in str(error):  # a refusal of the rule's own (dropout): stands
                    raise
                # a rule that cannot bound this form of its op: the op is named and its outputs fall
                # back to ULP error; if the op itself fails, that is the model's error and propagates
                out = func(*args, **kwargs)
                return self._unknown(
                    func, out, explicit_vdtype, args, kwargs, f"its bound rule failed: {type(error).__name__}: {error}"
                )
        if packet in DATA_MOVEMENT:
            return self._data_movement(func, args, kwargs)
        if func._schema.is_mutable:
            return self._inplace(func, args, kwargs, explicit_vdtype)
        if packet in EXACT or torch.Tag.pointwise in func.tags:
            return self._pointwise(func, args, kwargs, explicit_vdtype)
        if not any(_floating(t) for t in _tensors((args, kwargs))):  # nothing to bound: exact constants
            out = func(*args, **kwargs)
            for t in _tensors(out):
                self._set(t, None, explicit_vdtype or (self.model_dtype if t.dtype == F64 else t.dtype))
            return out
        decomposition = _decomposition(func)
        if decomposition is not None:
            self.decomposed[str(func)] += 1
            with self:
                return decomposition(*args, **kwargs)
        return self._unknown(func, func(*args, **kwargs), explicit_vdtype, args, kwargs)

    def _unknown(self, func, out, explicit_vdtype, args, kwargs, why: str = ""):
        """An op without a rule (or a form of it its rule does not cover, why says which): named,
        and its floating outputs carry a NaN bound."""
        if any(_floating(t) for t in _tensors(out)):
            self.unknown[f"{func} ({why})" if why else str(func)] += 1
            vd = explicit_vdtype or self._result_vdtype(args, kwargs)
            for t in _tensors(out):
                if _floating(t):
                    self._set(t, torch.full_like(t, math.nan, dtype=F64), vd)
        return out

    # ---- generic rules
    def _cast(self, func, args, kwargs, explicit_vdtype):
        x = args[0]
        if not _floating(x) or explicit_vdtype is None:
            out = func(*args, **kwargs)
            if _floating(out) and _floating(x):
                self._set(out, self.info.get(x, (None, None))[0], self.vdtype(x))
            elif _floating(out):
                self._set(out, None, explicit_vdtype or (self.model_dtype if out.dtype == F64 else out.dtype))
            return out
        out = func(*args, **kwargs)  # kwargs["dtype"] is float64 now: the value is kept
        b = self.bound(x)
        if _coarser(explicit_vdtype, self.vdtype(x)):
            b = b + unit_roundoff(explicit_vdtype) * out.abs()
        self._set(out, b, explicit_vdtype)
        return out

    def _data_movement(self, func, args, kwargs):
        out = func(*args, **kwargs)
        floats = [t for t in _tensors((args, kwargs)) if _floating(t)]
        if not floats:
            return out
        if all(self.info.get(t, (None, None))[0] is None for t in floats):
            bounds = None
        else:
            bargs = _tree_map(args, lambda t: self.bound(t) if _floating(t) else t)
            for index, value in _BOUND_ARGS.get(func.overloadpacket.__name__, {}).items():
                if len(bargs) > index:
                    bargs = (*bargs[:index], value, *bargs[index + 1 :])
            bkwargs = _tree_map(kwargs, lambda t: self.bound(t) if _floating(t) else t)
            bounds = func(*bargs, **bkwargs)
        vd = self.vdtype(floats[0])
        out_tensors = _tensors(out)
        b_tensors = _tensors(bounds) if bounds is not None else [None] * len(out_tensors)
        for t, b in zip(out_tensors, b_tensors):
            self._set(t, b, vd)
        return out

    def _pointwise(self, func, args, kwargs, explicit_vdtype):
        out = func(*args, **kwargs)
        if not _floating(out):
            return out
        vd = explicit_vdtype or self._result_vdtype(args, kwargs)
        carried = None
        formula = _DERIVATIVES.get(func.overloadpacket)
        for i, a in enumerate(args):
            if not _floating(a) or self.info.get(a, (None, None))[0] is None:
                continue
            if formula is not None:
                d = formula(i, args, kwargs, out)
            else:
                d = _central_difference(func, args, kwargs, i)
            term = _abs(d) * self.bound(a)
            if func.overloadpacket in EXACT and isinstance(d, torch.Tensor):
                # a selection: an element not selected carries none of its error, even an infinite one
                term = torch.where(d == 0, torch.zeros_like(term), term)
            carried = term if carried is None else carried + term
        if formula is not None and func.overloadpacket not in EXACT:
            # a Python float operand is stored at the op's precision first (mul_scalar: 2u|z|)
            for i, a in enumerate(args):
                if isinstance(a, float) and math.isfinite(a) and torch.tensor(a, dtype=vd).item() != a:
                    term = _abs(formula(i, args, kwargs, out)) * (unit_roundoff(vd) * abs(a))
                    carried = term if carried is None else carried + term
        own_rule = _OWN_ERRORS.get(func.overloadpacket)
        if own_rule is not None:
            own = own_rule(args, kwargs, out, unit_roundoff(_opmath(vd)), vd)
        else:
            own = None if func.overloadpacket in EXACT else unit_roundoff(vd) * out.abs()
        if carried is None and own is None:
            self._set(out, None, vd)
        else:
            total = own if carried is None else (carried if own is None else carried + own)
            self._set(out, torch.nan_to_num(total, nan=math.nan, posinf=math.inf), vd)
        return out

    def _inplace(self, func, args, kwargs, explicit_vdtype):
        name = func.overloadpacket.__name__.rstrip("_")
        target = args[0]
        if func.overloadpacket is aten.copy_:
            src = args[1]
            before = self.vdtype(target)
            out = func(*args, **kwargs)
            b = self.bound(src) if _floating(src) else None
            if b is not None and _coarser(before, self.vdtype(src)):
                b = b + unit_roundoff(before) * target.abs()
            if b is not None:
                b = b.expand(target.shape).clone()
            self._set(target, b, before)
            return out
        functional = getattr(getattr(aten, name, None), func._overloadname, None)
        if functional is None or "out" in kwargs:
            out = func(*args, **kwargs)
            for t in _tensors(out):
                if _floating(t):
                    self.unknown[str(func)] += 1
                    self._set(t, torch.full_like(t, math.nan, dtype=F64), self.vdtype(t))
            return out
        vd = self.vdtype(target)
        result = self.__torch_dispatch__(functional, (), args, kwargs)  # bound of the functional form
        b = self.info.get(result, (None, None))[0]
        target.copy_(result)
        self._set(target, None if b is None else b.clone(), vd)
        return target


def _decomposition(func):
    from torch._decomp import decomposition_table

    decomposition = decomposition_table.get(func)
    if decomposition is not None:
        return decomposition
    if torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), torch._C.DispatchKey.CompositeImplicitAutograd):
        return func.decompose
    return None


def _central_difference(func, args, kwargs, i):
    """d func / d args[i], elementwise, by a central difference in float64 (h relative to x)."""
    x = args[i]
    h = 1e-7 * torch.clamp(x.abs(), min=1e-3)
    plus = list(args)
    minus = list(args)
    plus[i], minus[i] = x + h, x - h
    d = (func(*plus, **kwargs) - func(*minus, **kwargs)) / (2 * h)
    return torch.nan_to_num(d, nan=0.0)


# ---- derivatives of common elementwise ops: formula(i, args, kwargs, out) -> df/d args[i]
def _scalar_or(args, k, default=1.0):
    return args[k] if len(args) > k else default


def _d_add(i, a, kw, z):
    if i == 0:
        return 1.0
    return kw.get("alpha", _scalar_or(a, 2))


def _d_sub(i, a, kw, z):
    if i == 0:
        return 1.0
    return -kw.get("alpha", _scalar_or(a, 2))


def _d_mul(i, a, kw, z):
    return a[1 - i]


def _d_div(i, a, kw, z):
    if kw.get("rounding_mode") is not None:
        return 0.0
    y = a[1]
    return 1.0 / y if i == 0 else -z / y


def _d_pow(i, a, kw, z):
    x, p = a[0], a[1]
    if i == 0:
        return p * x.pow(p - 1) if isinstance(p, (int, float)) else p * x.pow(p - 1)
    return z * torch.log(torch.abs(x) if isinstance(x, torch.Tensor) else torch.tensor(abs(x), dtype=F64))


def _gelu_derivative(x, approximate):
    if approximate == "tanh":
        k = math.sqrt(2 / math.pi)
        inner = k * (x + 0.044715 * x**3)
        t = torch.tanh(inner)
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * k * (1 + 3 * 0.044715 * x * x)
    cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
    pdf = torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return cdf + x * pdf


_DERIVATIVES = {
    aten.add: _d_add,
    aten.sub: _d_sub,
    aten.rsub: lambda i, a, kw, z: (-kw.get("alpha", _scalar_or(a, 2))) if i == 0 else 1.0,
    aten.mul: _d_mul,
    aten.div: _d_div,
    aten.true_divide: _d_div,
    aten.pow: _d_pow,
    aten.exp: lambda i, a, kw, z: z,
    aten.expm1: lambda i, a, kw, z: z + 1,
    aten.exp2: lambda i, a, kw, z: z * math.log(2),
    aten.log: lambda i, a, kw, z: 1.0 / a[0],
    aten.log1p: lambda i, a, kw, z: 1.0 / (1 + a[0]),
    aten.log2: lambda i, a, kw, z: 1.0 / (a[0] * math.log(2)),
    aten.sqrt: lambda i, a, kw, z: 0.5 / z,
    aten.rsqrt: lambda i, a, kw, z: -0.5 * z / a[0],
    aten.reciprocal: lambda i, a, kw, z: -z * z,
    aten.tanh: lambda i, a, kw, z: 1 - z * z,
    aten.sigmoid: lambda i, a, kw, z: z * (1 - z),
    aten.silu: lambda i, a, kw, z: torch.sigmoid(a[0]) * (1 + a[0] * (1 - torch.sigmoid(a[0]))),
    aten.erf: lambda i, a, kw, z: 2 / math.sqrt(math.pi) * torch.exp(-a[0] * a[0]),
    aten.sin: lambda i, a, kw, z: torch.cos(a[0]),
    aten.cos: lambda i, a, kw, z: -torch.sin(a[0]),
    aten.gelu: lambda i, a, kw, z: _gelu_derivative(a[0], kw.get("approximate", _scalar_or(a, 1, "none"))),
    aten.neg: lambda i, a, kw, z: -1.0,
    aten.abs: lambda i, a, kw, z: 1.0,
    aten.relu: lambda i, a, kw, z: (a[0] > 0).to(F64),
    aten.where: lambda i, a, kw, z: a[0].to(F64) if i == 1 else (~a[0]).to(F64),
    aten.masked_fill: lambda i, a, kw, z: (~a[1]).to(F64),
    aten.clamp: lambda i, a, kw, z: (z == a[0]).to(F64),
    aten.clamp_min: lambda i, a, kw, z: (z == a[0]).to(F64),
    aten.clamp_max: lambda i, a, kw, z: (z == a[0]).to(F64),
    aten.maximum: lambda i, a, kw, z: (z == a[i]).to(F64),
    aten.minimum: lambda i, a, kw, z: (z == a[i]).to(F64),
    aten.lerp: lambda i, a, kw, z: (1 - a[2]) if i == 0 else (a[2] if i == 1 else a[1] - a[0]),
    aten.addcmul: lambda i, a, kw, z: 1.0 if i == 0 else kw.get("value", 1.0) * a[3 - i],
}


# ---- own rounding of the activations and their backward ops, from the evaluation ATen's CPU kernels
# use (aten/src/ATen/native/cpu/Activation.cpp, BinaryOpsKernel.cpp for sigmoid/tanh_backward).
# own(args, kwargs, z, uo, vd): uo is the unit roundoff the kernel computes in (float for bf16 and
# f16: ATen's opmath), vd the result's dtype (uv its unit roundoff, eta its underflow: a rounding
# into f16's subnormals is off by up to eta whatever |z|). These functions are sums of terms that cancel (1 +
# erf(w) for w < 0, Phi(x) + x phi(x) near x = -0.75, 1 + x (1 - s) near x = -1.28), so the error
# scales with the terms' magnitudes, not with |z|: u|z| alone is not a bound there. Library
# functions are taken as accurate to a few uo: ATen's vectorized float erf (Abramowitz-Stegun
# 7.1.26, 1.5e-7 absolute, evaluated in float) reads up to 12.5 u_f32 absolute over [-8, 8] as
# gelu's evaluation implies it (2 gelu(x) / x - 1 against fp64 erf): ERF_ABS uo absolute; exp and
# tanh (Sleef, 1 ulp; 1.05 u_f32 measured): LIBRARY_REL uo relative. The error carried from the operands is the
# derivative's term of _pointwise, as for any pointwise op.
ERF_ABS = 16.0
LIBRARY_REL = 2.0
_SQRT_2PI = math.sqrt(2 * math.pi)
_TANH_BETA = math.sqrt(2 / math.pi)  # ATen's kBeta of the tanh form
_TANH_KAPPA = 0.044715


def _opmath(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def _final_rounding(z, uo, vd):
    """The last operation's rounding at uo and, for bf16 / f16, the store to the result dtype."""
    uv = unit_roundoff(vd)
    return (uv + uo if uo < uv else uv) * z.abs() + UNDERFLOW.get(vd, 0.0)


def _approximate(args, kwargs, index):
    return kwargs.get("approximate", args[index] if len(args) > index else "none")


def _tanh_form_inner(x, uo):
    """inner = kBeta (x + kKappa x^3) with x^3 = x * x * x (2 roundings), the product by kKappa, the
    add and the product by kBeta (one each); returns (tanh(inner), its error bound)."""
    inner = _TANH_BETA * (x + _TANH_KAPPA * x**3)
    e_inner = uo * (3 * _TANH_BETA * _TANH_KAPPA * x.abs() ** 3 + 2 * inner.abs())
    t = torch.tanh(inner)
    return t, (1 - t * t) * e_inner + LIBRARY_REL * uo * t.abs()


def _own_gelu(args, kwargs, z, uo, vd):
    """erf form, x * 0.5 * (1 + erf(x * kAlpha)): erf's absolute error, the product x kAlpha moving
    erf by erf'(w) uo |w| (times 0.5|x| that is uo |x|^2 phi(x)), then 1 + erf and the product
    rounding: 0.5 |x| ERF_ABS uo + uo x^2 phi(x) + uo |z| + the final rounding.
    tanh form, 0.5 x (1 + tanh(inner)): 0.5|x| E_tanh, then 1 + t and the product likewise."""
    x = args[0]
    if _approximate(args, kwargs, 1) == "tanh":
        _, e_t = _tanh_form_inner(x, uo)
        terms = 0.5 * x.abs() * e_t
    else:
        phi = torch.exp(-0.5 * x * x) / _SQRT_2PI
        terms = 0.5 * x.abs() * ERF_ABS * uo + uo * x * x * phi
    return terms + uo * z.abs() + _final_rounding(z, uo, vd)


def _own_gelu_backward(args, kwargs, z, uo, vd):
    """dy * (cdf + x * pdf). erf form: cdf = 0.5 (1 + erf(x kAlpha)) carries 0.5 ERF_ABS uo, the
    argument's rounding |x| phi uo and 1 + erf's uo cdf; pdf = kBeta exp(-0.5 x x) carries
    uo (x^2 / 2 + LIBRARY_REL + 1) relative (x x, exp, kBeta), x pdf one more uo; the sum uo |g'|.
    tanh form: left = 0.5 x, right = 1 + t, g' = 0.5 right + left (1 - t^2) inner', inner' =
    kBeta (1 + 3 kKappa x^2) (5 uo relative): 0.5 E_t + 0.5 uo right, |left| inner' E_(1-t^2) with
    E_(1-t^2) = 2|t| E_t + uo (t^2 + |1 - t^2|), 7 uo |right_derivative| (its products), uo |g'|.
    Times |dy|, plus the product's rounding."""
    dy, x = args[0], args[1]
    if _approximate(args, kwargs, 2) == "tanh":
        t, e_t = _tanh_form_inner(x, uo)
        inner_derivative = _TANH_BETA * (1 + 3 * _TANH_KAPPA * x * x)
        right_derivative = 0.5 * x * (1 - t * t) * inner_derivative
        derivative = 0.5 * (1 + t) + right_derivative
        e_square = 2 * t.abs() * e_t + uo * (t * t + (1 - t * t).abs())
        terms = (
            0.5 * e_t
            + 0.5 * uo * (1 + t).abs()
            + 0.5 * x.abs() * inner_derivative * e_square
            + 7 * uo * right_derivative.abs()
        )
    else:
        cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
        x_pdf = (x * torch.exp(-0.5 * x * x) / _SQRT_2PI).abs()
        derivative = cdf + x * torch.exp(-0.5 * x * x) / _SQRT_2PI
        terms = 0.5 * ERF_ABS * uo + uo * (x_pdf + cdf) + uo * x_pdf * (0.5 * x * x + LIBRARY_REL + 2)
    return dy.abs() * (terms + uo * derivative.abs()) + _final_rounding(z, uo, vd)


def _own_silu_backward(args, kwargs, z, uo, vd):
    """dy * s * (1 + x * (1 - s)), s = 1 / (1 + exp(-x)): s carries E_s = s uo (LIBRARY_REL (1 - s)
    + 2) (exp, the add, the division); 1 - s adds uo (1 - s), x (1 - s) and 1 + ... one uo each;
    dy * s one uo |z|; h = 1 + x (1 - s) crosses 0 near x = -1.28, where the terms do not."""
    dy, x = args[0], args[1]
    s = torch.sigmoid(x)
    h = 1 + x * (1 - s)
    e_s = s * uo * (LIBRARY_REL * (1 - s) + 2)
    terms = h.abs() * e_s + s * (x.abs() * (e_s + 2 * uo * (1 - s)) + uo * h.abs())
    return dy.abs() * terms + uo * z.abs() + _final_rounding(z, uo, vd)


def _own_sigmoid_backward(args, kwargs, z, uo, vd):
    """dy * (1 - y) * y: three roundings of the result's size (nothing cancels: 1 - y rounds
    relative to itself). ATen's CPU kernel evaluates f16 in f16 itself (not opmath), so each is at
    uv, and each may fall into f16's subnormals: 3 (uv |z| + eta)."""
    return 3 * (unit_roundoff(vd) * z.abs() + UNDERFLOW.get(vd, 0.0))


def _own_tanh_backward(args, kwargs, z, uo, vd):
    """dy * (1 - y * y): y y rounds (uo |dy| y^2, which 1 - y^2 near |y| = 1 does not shrink), the
    subtraction uo |z|, the product's final rounding."""
    dy, y = args[0], args[1]
    return uo * dy.abs() * y * y + uo * z.abs() + _final_rounding(z, uo, vd)


_OWN_ERRORS = {
    aten.gelu: _own_gelu,
    aten.gelu_backward: _own_gelu_backward,
    aten.silu_backward: _own_silu_backward,
    aten.sigmoid_backward: _own_sigmoid_backward,
    aten.tanh_backward: _own_tanh_backward,
}


# ---- rules of their own
# A sum of K terms (a dot product's K products, a reduction's K elements) accumulated in the kernel's precision u_acc (f32 for f16, bf16 and f32
# results: ATen's opmath; f64 for f64) carries, besides the result's own rounding u_out, an error of
# c(K) u_acc sum|terms|. Deterministically c(K) = gamma_K / u_acc = K / (1 - K u_acc) in any
# order (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., sec. 3.1), which is vacuous
# for large K; with the rounding errors modelled as independent and of mean zero it is lambda sqrt(K)
# with probability at least 1 - 2 exp(-lambda^2 / 2) per element, whatever the order of summation
# (Higham & Mary, SIAM J. Sci. Comput. 41(5), 2019, A2815-A2835, Theorem 3.1; Connolly, Higham &
# Mary, SIAM J. Sci. Comput. 43(1), 2021, for the 1 - 2 exp(-lambda^2/2) form). The smaller of the
# two is counted: exact up to K = lambda^2, probabilistic beyond (docs/conditioned-error.md, "Dot
# products" and "Sums": eager's and Inductor's CPU kernels measured against it; Limits: equal terms
# that Inductor adds one by one round alike and exceed the probabilistic form).
ACCUMULATION_LAMBDA = 3.0


def _accumulation(length: int, vd: torch.dtype) -> float:
    """c(K) u_acc for a sum of `length` terms whose result has dtype vd (see above)."""
    return _accumulation_at(length, unit_roundoff(_opmath(vd)))


def _accumulation_at(length: int, u_acc: float) -> float:
    """c(K) u_acc for a sum of `length` terms, each addition rounded at u_acc."""
    if length <= 1 or u_acc == 0.0:
        return 0.0
    deterministic = length * u_acc / (1 - length * u_acc) if length * u_acc < 1 else math.inf
    return min(deterministic, ACCUMULATION_LAMBDA * math.sqrt(length) * u_acc)


def _prefix_accumulation(length: int, vd: torch.dtype) -> torch.Tensor:
    """_accumulation(k, vd) for k = 1 .. length: the prefixes a cumulative sum accumulates."""
    k = torch.arange(1, length + 1, dtype=F64)
    u_acc = unit_roundoff(_opmath(vd))
    deterministic = torch.where(k * u_acc < 1, k * u_acc / (1 - k * u_acc), math.inf)
    return torch.where(k > 1, torch.minimum(deterministic, ACCUMULATION_LAMBDA * k.sqrt() * u_acc), 0.0)


def _terms_per_element(x: torch.Tensor, out: torch.Tensor) -> int:
    """How many of x's elements a reduction adds into each element of out."""
    return x.numel() // out.numel() if out.numel() else 0


def _convolution_groups(args, kwargs, index) -> tuple[bool, int]:
    """(transposed, groups) of a convolution's arguments, transposed at index and groups at index + 2."""
    transposed = args[index] if len(args) > index else kwargs.get("transposed", False)
    groups = args[index + 2] if len(args) > index + 2 else kwargs.get("groups", 1)
    return bool(transposed), int(groups)


def _reduction_length(func, args, kwargs) -> int:
    """The number of products each element of a bilinear op's result sums: A's last dimension for the
    products, the input channels per group times the kernel's size for a convolution (an upper bound
    for a transposed one, where a stride leaves some kernel positions out)."""
    a, b = args[0], args[1]
    packet = func.overloadpacket
    if packet in (aten.dot, aten.vdot):
        return a.numel()
    if packet in (aten.convolution, aten._convolution):
        transposed, groups = _convolution_groups(args, kwargs, 6)
        per_group = b.shape[0] // groups if transposed else b.shape[1]
        return per_group * math.prod(b.shape[2:])
    return a.shape[-1]


def _rule_bilinear(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    out = func(*args, **kwargs)
    a, b = args[0], args[1]
    vd = explicit_vdtype or mode._result_vdtype(args[:2], {})
    rest = list(args[2:])
    packet = func.overloadpacket
    conv = packet in (aten.convolution, aten._convolution)
    if conv:
        rest[0] = None  # the bias, added below

    def f(x, y):
        return func(x, y, *rest, **kwargs)

    abs_a, abs_b = a.abs(), b.abs()
    ea, eb = mode.info.get(a, (None, None))[0], mode.info.get(b, (None, None))[0]
    length = _reduction_length(func, args, kwargs)
    has_bias = conv and args[2] is not None
    # the bias may seed the accumulator: one term more
    own = unit_roundoff(vd) + _accumulation(length + has_bias, vd)
    # own f(|A|, |B|) + f(E_A, |B|) = f(own |A| + E_A, |B|): one product fewer (f is bilinear)
    left = own * abs_a if ea is None else torch.add(ea, abs_a, alpha=own)
    total = f(left, abs_b)
    if eb is not None:
        total = total + f(abs_a, eb)
    if has_bias:
        bias = args[2]
        shape = [1, -1] + [1] * (out.dim() - 2)
        accumulated = _accumulation(length + 1, vd) * bias.abs().reshape(shape)
        total = total + mode.bound(bias).reshape(shape) + unit_roundoff(vd) * out.abs() + accumulated
    mode._set(out, total, vd)
    return out


def _rule_convolution_backward(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    """convolution_backward(grad_output, input, weight, ...) -> (grad_input, grad_weight, grad_bias):
    grad_input is bilinear in (grad_output, weight), grad_weight in (grad_output, input), grad_bias
    linear in grad_output, so the kernel itself applied to magnitudes bounds each as
    _rule_bilinear bounds the forward: (u + c(K) u_acc) f(|G|, |X|, |W|) (_accumulation, each
    gradient with its own number of terms K: grad_input the output channels per group times the
    kernel's size, grad_weight and grad_bias the batch times the spatial size they sum over), then
    f(E_G, |X|, |W|) and f(|G|, E_X, E_W), whose grad_input takes E_W alone and grad_weight E_X
    alone. A gradient not asked for (output_mask) is None."""
    out = func(*args, **kwargs)
    grad_out, x, w = args[0], args[1], args[2]
    vd = explicit_vdtype or mode._result_vdtype(args[:3], {})
    rest = args[3:]
    bound_of = {t: mode.info.get(t, (None, None))[0] for t in (grad_out, x, w)}
    e_grad = bound_of[grad_out]
    u = unit_roundoff(vd)
    transposed, groups = _convolution_groups(args, kwargs, 7)
    kernel_size = math.prod(w.shape[2:])
    batch = grad_out.shape[0]
    lengths = (
        (w.shape[1] if transposed else w.shape[0] // groups) * kernel_size,
        batch * math.prod((x if transposed else grad_out).shape[2:]),
        batch * math.prod(grad_out.shape[2:]),
    )
    magnitudes = func(grad_out.abs(), x.abs(), w.abs(), *rest, **kwargs)
    total = [None if m is None else (u + _accumulation(k, vd)) * m for m, k in zip(magnitudes, lengths)]
    names = ("stride", "padding", "dilation", "transposed", "output_padding", "groups")
    params = [args[4 + i] if len(args) > 4 + i else kwargs[n] for i, n in enumerate(names)]
    if _convolution_backend(x, w, vd, params) in _SLOW_CONVOLUTIONS:
        # ATen's slow CPU convolutions (im2col and a GEMM a sample) store partial results in vd:
        # grad_input's columns (each a sum over the output channels) rounded to vd, then added
        # into the image window by window in vd (col2im, unless transposed); grad_weight's
        # sample-by-sample GEMMs added into it in vd (beta = 1). Those later sums add c_vd(terms)
        # times what they add, at most (1 + u + c(K)) m.
        later_sums = (1 if transposed else kernel_size, batch, 1)
        total = [
            None if t is None else t + _accumulation_at(n, u) * (1 + u + _accumulation(k, vd)) * m
            for t, m, n, k in zip(total, magnitudes, later_sums, lengths)
        ]
    if e_grad is not None:
        carried = func(e_grad, x.abs(), w.abs(), *rest, **kwargs)
        total = [t if c is None else t + c for t, c in zip(total, carried)]
    if bound_of[x] is not None or bound_of[w] is not None:
        carried = func(grad_out.abs(), mode.bound(x), mode.bound(w), *rest, **kwargs)
        for i in (0, 1):
            if total[i] is not None:
                total[i] = total[i] + carried[i]
    for value, bound in zip(out, total):
        if value is not None:
            mode._set(value, bound, vd)
    return out


# The convolution backends whose backward keeps partial results in the tensors' own dtype
# (torch._C._select_conv_backend's names): on the CPU wherever oneDNN does not run the dtype, as
# bf16 and f16 on processors without AVX-512 (docs/conditioned-error.md, "Convolutions").
_SLOW_CONVOLUTIONS = frozenset(
    {"Slow2d", "Slow3d", "SlowDilated2d", "SlowDilated3d", "SlowTranspose2d", "SlowTranspose3d"}
)


def _convolution_backend(x: torch.Tensor, w: torch.Tensor, vd: torch.dtype, params) -> str:
    """The backend torch dispatches a convolution of x's and w's shapes, device and dtype vd to;
    "Slow2d" where this torch cannot say (the bound that assumes the most roundings)."""
    stride, padding, dilation, transposed, output_padding, groups = params
    select = getattr(torch._C, "_select_conv_backend", None)
    if select is None:
        return "Slow2d"
    try:
        backend = select(
            torch.empty(x.shape, dtype=vd, device=x.device),
            torch.empty(w.shape, dtype=vd, device=w.device),
            None, list(stride), list(padding), list(dilation), bool(transposed), list(output_padding), int(groups),
            None,
        )  # fmt: skip
    except (RuntimeError, TypeError):
        return "Slow2d"
    return str(backend).rsplit(".", 1)[-1]


def _rule_addmm(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    """addmm / baddbmm / addmv: beta C + alpha (A @ B)."""
    out = func(*args, **kwargs)
    c, a, b = args[0], args[1], args[2]
    beta, alpha = kwargs.get("beta", 1), kwargs.get("alpha", 1)
    vd = explicit_vdtype or mode._result_vdtype(args[:3], {})
    mm = {aten.addmm: torch.mm, aten.baddbmm: torch.bmm, aten.addmv: torch.mv, aten.addbmm: None}[func.overloadpacket]
    if mm is None:

        def mm(x, y):
            return torch.bmm(x, y).sum(0)

    abs_a, abs_b = a.abs(), b.abs()
    u = unit_roundoff(vd)
    length = a.shape[-1] * (a.shape[0] if func.overloadpacket is aten.addbmm else 1)
    accumulated = _accumulation(length + (beta != 0), vd)  # beta C may seed the accumulator
    own = u + accumulated
    ea, eb = mode.info.get(a, (None, None))[0], mode.info.get(b, (None, None))[0]
    left = own * abs_a if ea is None else torch.add(ea, abs_a, alpha=own)  # bilinear: one product fewer
    total = mm(left, abs_b)
    if eb is not None:
        total += mm(abs_a, eb)
    if alpha != 1:
        total *= abs(alpha)
    total.add_(out.abs(), alpha=u)
    if beta != 0:
        total += (abs(beta) * accumulated) * _abs(c)
        if mode.info.get(c, (None, None))[0] is not None:
            total += abs(beta) * mode.bound(c)
    mode._set(out, total, vd)
    return out


def _rule_sum(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    out = func(*args, **kwargs)
    x = args[0]
    if not _floating(out) or not _floating(x):
        if _floating(out):
            mode._set(out, None, explicit_vdtype or mode.model_dtype)
        return out
    vd = explicit_vdtype or mode.vdtype(x)
    u = unit_roundoff(vd)
    # (u + c(K) u_acc) sum|x| (_accumulation); for mean, func is the mean: divided by n
    total = (u + _accumulation(_terms_per_element(x, out), vd)) * func(x.abs(), *args[1:], **kwargs)
    ex = mode.info.get(x, (None, None))[0]
    if ex is not None:
        total = total + func(ex, *args[1:], **kwargs)
    if func.overloadpacket is aten.mean:
        total = total + u * out.abs()
    mode._set(out, total, vd)
    return out


def _rule_cumsum(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    out = func(*args, **kwargs)
    x = args[0]
    if not _floating(out):
        return out
    vd = explicit_vdtype or mode.vdtype(x)
    dim = (args[1] if len(args) > 1 else kwargs["dim"]) % max(x.dim(), 1)
    # the k-th element of the scan sums k terms: (u + c(k) u_acc) of their magnitudes
    own = unit_roundoff(vd) + _prefix_accumulation(x.shape[dim] if x.dim() else 1, vd)
    own = own.reshape([-1] + [1] * (x.dim() - dim - 1)) if x.dim() else own.reshape(())
    total = func(x.abs(), *args[1:], **kwargs) * own + func(mode.bound(x), *args[1:], **kwargs)
    mode._set(out, total, vd)
    return out


def _rule_extreme(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    """amax / amin / max / min (and the .dim forms with indices): the bound of the extreme element
    (an exact op; the argmax is assumed not to move)."""
    out = func(*args, **kwargs)
    x = args[0]
    if not _floating(x):
        return out
    vd = mode.vdtype(x)
    ex = mode.info.get(x, (None, None))[0]
    if isinstance(out, tuple):  # values, indices
        values, indices = out[0], out[1]
        if ex is None:
            mode._set(values, None, vd)
            return out
        dim = args[1] if len(args) > 1 else kwargs.get("dim")
        keepdim = (args[2] if len(args) > 2 else kwargs.get("keepdim", False)) or values.dim() == x.dim()
        idx = indices if keepdim else indices.unsqueeze(dim)
        b = torch.gather(ex, dim, idx)
        mode._set(values, b if keepdim else b.squeeze(dim), vd)
        return out
    if ex is None:
        mode._set(out, None, vd)
        return out
    if len(args) > 1 and isinstance(args[1], torch.Tensor):  # max(x, y) is elementwise: the bound of
        vd = mode._result_vdtype(args, kwargs)  # the element taken (an exact selection)
        mode._set(out, torch.where(x == out, mode.bound(x), mode.bound(args[1])), vd)
        return out
    dims = args[1] if len(args) > 1 else kwargs.get("dim", None)
    if dims is None or dims == [] or dims == ():
        at = (x == out).to(F64)
        b = (ex * at).max() if ex.numel() else ex.sum()
    else:
        dims_list = [dims] if isinstance(dims, int) else list(dims)
        keep = torch.amax(x, dims_list, keepdim=True)
        b = torch.amax(torch.where(x == keep, ex, torch.zeros_like(ex)), dims_list, keepdim=True)
        keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
        if not keepdim:
            b = b.squeeze(dims_list) if hasattr(b, "squeeze") else b
    mode._set(out, b.reshape(out.shape), vd)
    return out


def _rule_var(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    """var / std / var_mean / std_mean: carried 2|x - m| E / n (the mean's own error does not enter
    to first order), own (5 u + c(n) u_acc) var (centering, squaring, the sum and its accumulation,
    the division); std = sqrt(var)."""
    out = func(*args, **kwargs)
    x = args[0]
    vd = mode.vdtype(x)
    u = unit_roundoff(vd)
    dims = args[1] if len(args) > 1 else kwargs.get("dim", None)
    keepdim = kwargs.get("keepdim", False)
    correction = kwargs.get("correction", None)
    unbiased = args[2] if len(args) > 2 and isinstance(args[2], bool) else None
    dims_list = list(range(x.dim())) if dims is None else ([dims] if isinstance(dims, int) else list(dims))
    n = 1
    for d in dims_list:
        n *= x.shape[d]
    c = 1 if (correction is None and unbiased in (None, True)) else (correction if correction is not None else 0)
    denom = max(n - c, 1)
    m = x.mean(dims_list, keepdim=True)
    var = ((x - m) ** 2).sum(dims_list, keepdim=True) / denom
    ex = mode.info.get(x, (None, None))[0]
    accumulated = _accumulation(n, vd)
    b_var = (5 * u + accumulated) * var
    if ex is not None:
        b_var = b_var + (2 * (x - m).abs() * ex).sum(dims_list, keepdim=True) / denom
    b_mean = ((u + accumulated) * x.abs().sum(dims_list, keepdim=True)) / n + u * m.abs()
    if ex is not None:
        b_mean = b_mean + ex.sum(dims_list, keepdim=True) / n
    is_std = func.overloadpacket in (aten.std, aten.std_mean)
    std = var.sqrt()
    b_first = (b_var / (2 * std.clamp_min(1e-300)) + u * std) if is_std else b_var
    if not keepdim:
        b_first, b_mean = b_first.squeeze(dims_list), b_mean.squeeze(dims_list)
    if isinstance(out, tuple):
        mode._set(out[0], b_first.reshape(out[0].shape), vd)
        mode._set(out[1], b_mean.reshape(out[1].shape), vd)
    else:
        mode._set(out, b_first.reshape(out.shape), vd)
    return out


def _softmax_bound(x, z, e, dim, u, log=False, accumulated=0.0):
    """accumulated: c(K) u_acc of the sum of the K exponentials (_accumulation), relative to it as
    they are positive."""
    m = torch.amax(x, dim, keepdim=True)
    finite = torch.isfinite(x)
    if e is not None:  # a masked (-inf) score stays -inf and its weight exactly 0, whatever its bound
        e = torch.where(finite, e, torch.zeros_like(e))
    shift = torch.where(finite, (x - m).abs(), torch.zeros_like(x))
    p = torch.exp(x - m)
    p = p / p.sum(dim, keepdim=True)
    mass = (p * shift).sum(dim, keepdim=True)
    if log:
        carried = (e + (p * e).sum(dim, keepdim=True)) if e is not None else 0.0
        own = u * (shift + mass + 2 + z.abs().nan_to_num(posinf=0.0)) + accumulated
        return torch.where(finite, carried + own, torch.zeros_like(x))
    carried = z * ((1 - z) * e + ((z * e).sum(dim, keepdim=True) - z * e)) if e is not None else 0.0
    own = (u * (shift + mass + 3) + accumulated) * z
    return torch.where(z > 0, carried + own, torch.zeros_like(x))


def _rule_softmax(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    out = func(*args, **kwargs)
    x, dim = args[0], args[1]
    vd = explicit_vdtype or mode.vdtype(x)
    if len(args) > 2 and args[2] is True and vd in (torch.float16, torch.bfloat16):
        vd = torch.float32  # half_to_float
    log = func.overloadpacket in (aten._log_softmax, aten.log_softmax)
    e = mode.info.get(x, (None, None))[0]
    length = x.shape[dim] if x.dim() else 1
    mode._set(out, _softmax_bound(x, out, e, dim, unit_roundoff(vd), log, _accumulation(length, vd)), vd)
    return out


def _rule_layer_norm(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    out = func(*args, **kwargs)
    x, shape, w, b = args[0], args[1], args[2], args[3]
    eps = args[4] if len(args) > 4 else kwargs.get("eps", 1e-5)
    vd = mode.vdtype(x)
    u = unit_roundoff(vd)
    dims = list(range(x.dim() - len(shape), x.dim()))
    k = 1
    for s in shape:
        k *= s
    mean = x.mean(dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dims, keepdim=True)
    r = torch.rsqrt(var + eps)
    xhat = (x - mean) * r
    wabs = w.abs() if w is not None else torch.ones((), dtype=F64)
    ex = mode.info.get(x, (None, None))[0]
    y = out[0]
    total = torch.zeros_like(y)
    if ex is not None:
        s_e = ex.sum(dims, keepdim=True) / k
        s_xe = (xhat.abs() * ex).sum(dims, keepdim=True) / k
        total = total + wabs * r * (ex + s_e + xhat.abs() * s_xe)
    if w is not None and mode.info.get(w, (None, None))[0] is not None:
        total = total + xhat.abs() * mode.bound(w)
    if b is not None and mode.info.get(b, (None, None))[0] is not None:
        total = total + mode.bound(b)
    wx = (wabs * xhat).abs()
    summed = u + _accumulation(k, vd)  # the mean's and the variance's sums of k terms each
    mean_sum = summed * x.abs().sum(dims, keepdim=True) / k
    own = wabs * r * mean_sum + summed * wx * var / (2 * (var + eps)) + 4 * u * wx
    if b is not None:
        own = own + u * y.abs()
    mode._set(y, total + own, vd)
    mode._set(out[1], mean_sum.reshape(out[1].shape) if out[1].numel() else None, vd)
    # rstd = rsqrt(var + eps), saved for the backward: var carries 2|x - m| E / n and its own 5 u var,
    # the derivative of rsqrt is -r^3 / 2, and adding eps and the rsqrt round once each
    if out[2].numel():
        own_var = (4 * u + summed) * var
        e_var = own_var + (2 * (x - mean).abs() * ex).sum(dims, keepdim=True) / k if ex is not None else own_var
        mode._set(out[2], (0.5 * r**3 * e_var + 2 * u * r).reshape(out[2].shape), vd)
    return out


# the attention ops whose tensors are laid out (batch, sequence, heads, head dim), not (batch, heads,
# sequence, head dim); their variable-length and windowed forms have no rule
_SEQUENCE_MAJOR = _packets(
    "_flash_attention_forward", "_efficient_attention_forward", "_flash_attention_backward",
    "_efficient_attention_backward",
)  # fmt: skip


class NoRule(Exception):
    """A form of an op that its rule does not cover: the op is named and judged on ULP error."""


def _given(value) -> bool:
    """An optional argument that is set: a kernel that is not variable-length passes its sequence
    offsets as None or, between a forward and its backward, as an empty tensor."""
    return value is not None and not (isinstance(value, torch.Tensor) and value.numel() == 0)


def _attention_arguments(func, args, kwargs) -> tuple[dict, bool, Any, float]:
    """The arguments of an attention kernel, forward or backward, by name, and its (is_causal, mask,
    scale); dropout is refused (a random op has no reference) and the forms no rule covers raise NoRule."""
    names = [a.name for a in func._schema.arguments]
    values = dict(zip(names, args))
    values.update(kwargs)
    dropout = values.get("dropout_p", 0.0) or 0.0
    if dropout:
        raise RuntimeError(f"fusebench: {func} with dropout_p={dropout}: a random op has no reference (train mode?)")
    for name in ("cum_seq_q", "cum_seq_k", "cu_seqlens_q", "cu_seqlens_k", "seqused_k", "seqlen_k", "block_table"):
        if _given(values.get(name)):
            raise NoRule(f"{func} with {name} (variable-length sequences)")
    for name in ("window_size_left", "window_size_right", "window_size"):
        if values.get(name) not in (None, -1):
            raise NoRule(f"{func} with {name}={values.get(name)} (a sliding window)")
    custom_mask = values.get("custom_mask_type", 0) or 0
    if custom_mask not in (0, 1):
        raise NoRule(f"{func} with custom_mask_type={custom_mask} (causal aligned bottom-right)")
    is_causal = bool(values.get("is_causal", False)) or custom_mask == 1
    mask = next((values[n] for n in ("attn_mask", "attn_bias", "bias", "mask") if _given(values.get(n))), None)
    scale = values.get("scale")
    if scale is None:
        scale = 1.0 / math.sqrt(values["query"].shape[-1])
    return values, is_causal, mask, scale


def _attention_weights(func, q, k, v, is_causal, mask, scale, sequence_major):
    """Run under the mode: the query, key and value heads-major, the key and value heads repeated over
    their query-head group (grouped-query attention, whether or not the kernel takes enable_gqa),
    and the attention weights p = softmax(q k^T scale + mask). A boolean mask keeps where True, a
    float mask is added; is_causal keeps the lower triangle aligned top-left (torch's convention); a
    row with every key masked has weights 0, as torch's kernels give it (aten._safe_softmax)."""
    if sequence_major:
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    group = 1
    if q.dim() >= 3 and k.dim() >= 3 and q.shape[-3] != k.shape[-3]:
        if q.shape[-3] % k.shape[-3]:
            raise NoRule(f"{func}: {q.shape[-3]} query heads are not a multiple of {k.shape[-3]} key heads")
        group = q.shape[-3] // k.shape[-3]
        k = k.repeat_interleave(group, -3)
        v = v.repeat_interleave(group, -3)
    scores = torch.matmul(q, k.transpose(-2, -1)) * scale
    if is_causal:
        L, S = q.shape[-2], k.shape[-2]
        keep = torch.ones(L, S, dtype=torch.bool, device=scores.device).tril()
        scores = scores.masked_fill(~keep, -math.inf)
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask
    none_kept = (scores == -math.inf).all(-1, keepdim=True)
    p = torch.softmax(scores.masked_fill(none_kept, 0.0), -1).masked_fill(none_kept, 0.0)
    return q, k, v, group, scores, p


def _round_to_query_dtype(mode: BoundMode, query: torch.Tensor, result: torch.Tensor) -> None:
    """The kernel returns the query's dtype: a mask of a finer dtype (promoted in the decomposition)
    does not spare the result its rounding to it."""
    query_dtype, reached = mode.vdtype(query), mode.vdtype(result)
    if _coarser(query_dtype, reached):
        mode._set(result, mode.bound(result) + unit_roundoff(query_dtype) * result.abs(), query_dtype)


def _rule_attention(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    """Scaled dot-product attention, every kernel of torch's family (math, flash, efficient, cuDNN,
    the CPU's flash, the overrideable one, and the sequence-major forward kernels): decomposed into
    its ops (_attention_weights, then p v), each bounded by its rule; the result is the
    decomposition's fp64 value (the same function)."""
    values, is_causal, mask, scale = _attention_arguments(func, args, kwargs)
    sequence_major = func.overloadpacket in _SEQUENCE_MAJOR
    with mode:
        q, k, v, _, scores, p = _attention_weights(
            func, values["query"], values["key"], values["value"], is_causal, mask, scale, sequence_major
        )
        out = torch.matmul(p, v)
        lse = torch.logsumexp(scores, -1)
        if sequence_major:
            out = out.transpose(1, 2)
    _round_to_query_dtype(mode, values["query"], out)
    returns = func._schema.returns
    if len(returns) == 1:
        return out
    extra = []
    for index, r in enumerate(returns[1:], start=1):
        kind = str(r.type)
        if index == 1 and kind == "Tensor":
            extra.append(lse)  # logsumexp
        elif kind in ("SymInt", "int"):
            extra.append(q.shape[-2] if "q" in (r.name or "") else k.shape[-2])  # max_q / max_k
        else:
            # sequence offsets, RNG state, debug mask: unused
            extra.append(torch.empty(0, dtype=F64, device=out.device))
    return (out, *extra)


def _sum_to_shape(x: torch.Tensor, shape) -> torch.Tensor:
    """x summed over the dimensions a tensor of shape was broadcast along (run under the mode)."""
    lead = x.dim() - len(shape)
    if lead:
        x = x.sum(list(range(lead)))
    dims = [d for d, size in enumerate(shape) if size == 1 and x.shape[d] != 1]
    return x.sum(dims, keepdim=True) if dims else x


def _rule_attention_backward(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    """The backward of every attention kernel of torch's family: decomposed as the forward
    (_attention_weights recomputes p from the query and key, as the kernels do from the logsumexp),
    then dV = p^T dO, dP = dO V^T, dS = p (dP - rowsum(dO O)) with O = p V (the kernels' delta),
    dQ = dS K scale, dK = dS^T Q scale; under grouped-query attention dK and dV are summed over
    each key head's group of query heads. Each op bounded by its rule, each gradient rounded to the
    query's dtype; a float mask's gradient (the efficient kernels' fourth result) is dS."""
    values, is_causal, mask, scale = _attention_arguments(func, args, kwargs)
    sequence_major = func.overloadpacket in _SEQUENCE_MAJOR
    grad_out = values.get("grad_out", values.get("grad_out_"))
    query, key = values["query"], values["key"]
    with mode:
        q, k, v, group, _, p = _attention_weights(
            func, query, key, values["value"], is_causal, mask, scale, sequence_major
        )
        out = torch.matmul(p, v)
    _round_to_query_dtype(mode, query, out)
    with mode:
        d_out = grad_out.transpose(1, 2) if sequence_major else grad_out
        grad_value = torch.matmul(p.transpose(-2, -1), d_out)
        grad_p = torch.matmul(d_out, v.transpose(-2, -1))
        delta = (d_out * out).sum(-1, keepdim=True)
        grad_scores = p * (grad_p - delta)
        grad_query = torch.matmul(grad_scores, k) * scale
        grad_key = torch.matmul(grad_scores.transpose(-2, -1), q) * scale
        if group > 1:
            grad_key = grad_key.unflatten(-3, (grad_key.shape[-3] // group, group)).sum(-3)
            grad_value = grad_value.unflatten(-3, (grad_value.shape[-3] // group, group)).sum(-3)
        grads = [grad_query, grad_key, grad_value]
        if sequence_major:
            grads = [g.transpose(1, 2) for g in grads]
        if len(func._schema.returns) == 4:  # the efficient kernels: the float mask's gradient
            wanted = values.get("bias_requires_grad", (values.get("grad_input_mask") or [False] * 4)[3])
            floating_mask = mask is not None and mask.is_floating_point()
            # not asked for: the kernels return an undefined tensor
            grads.append(_sum_to_shape(grad_scores, mask.shape) if wanted and floating_mask else None)
    for g in grads:
        if g is not None:
            _round_to_query_dtype(mode, query, g)
    return tuple(grads)


def _rule_logsumexp(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    out = func(*args, **kwargs)
    x = args[0]
    dims = args[1] if len(args) > 1 else kwargs.get("dim")
    keepdim = args[2] if len(args) > 2 else kwargs.get("keepdim", False)
    vd = mode.vdtype(x)
    u = unit_roundoff(vd)
    dims_list = [dims] if isinstance(dims, int) else list(dims)
    m = torch.amax(x, dims_list, keepdim=True).nan_to_num(neginf=0.0)
    p = torch.exp(x - m)
    p = p / p.sum(dims_list, keepdim=True)
    shift = torch.where(torch.isfinite(x), (x - m).abs(), torch.zeros_like(x))
    # the sum of the positive exponentials accumulates c(K) u_acc relative to it: as much absolute after the log
    accumulated = _accumulation(_terms_per_element(x, out), vd)
    total = (
        u * ((p * shift).sum(dims_list, keepdim=True) + 2)
        + accumulated
        + u * out.abs().reshape(p.sum(dims_list, keepdim=True).shape)
    )
    ex = mode.info.get(x, (None, None))[0]
    if ex is not None:
        total = total + (p * torch.where(torch.isfinite(x), ex, torch.zeros_like(ex))).sum(dims_list, keepdim=True)
    if not keepdim:
        total = total.squeeze(dims_list)
    mode._set(out, torch.where(torch.isfinite(out), total.reshape(out.shape), torch.zeros_like(out)), vd)
    return out


def _rule_sorted(mode: BoundMode, func, args, kwargs, explicit_vdtype):
    """sort / topk / kthvalue / median.dim / mode.dim: values picked from x (exact), the bound of the
    element picked (its index is returned beside)."""
    out = func(*args, **kwargs)
    x = args[0]
    if not (isinstance(out, tuple) and len(out) == 2 and _floating(x)):
        return mode._unknown(func, out, explicit_vdtype, args, kwargs)
    values, indices = out
    names = [a.name for a in func._schema.arguments]
    given = dict(zip(names, args)) | kwargs
    dim = given.get("dim", -1)
    ex = mode.info.get(x, (None, None))[0]
    if ex is None:
        mode._set(values, None, mode.vdtype(x))
        return out
    idx = indices if indices.dim() == x.dim() else indices.unsqueeze(dim)
    b = torch.gather(ex, dim, idx)
    mode._set(values, b.reshape(values.shape), mode.vdtype(x))
    return out


_RULES = {
    **{p: _rule_sorted for p in _packets("sort", "topk", "kthvalue", "mode")},
    **{p: _rule_bilinear for p in BILINEAR},
    aten.convolution_backward: _rule_convolution_backward,
    **{p: _rule_addmm for p in _packets("addmm", "baddbmm", "addmv", "addbmm")},
    **{p: _rule_sum for p in _packets("sum", "mean")},
    **{p: _rule_cumsum for p in _packets("cumsum")},
    **{p: _rule_extreme for p in _packets("amax", "amin", "max", "min")},
    **{p: _rule_var for p in _packets("var", "std", "var_mean", "std_mean")},
    **{p: _rule_softmax for p in _packets("_softmax", "softmax", "_safe_softmax", "_log_softmax", "log_softmax")},
    **{p: _rule_layer_norm for p in _packets("native_layer_norm")},
    **{p: _rule_logsumexp for p in _packets("logsumexp")},
    **{
        p: _rule_attention
        for p in _packets(
            "_scaled_dot_product_flash_attention_for_cpu",
            "_scaled_dot_product_flash_attention",
            "_scaled_dot_product_efficient_attention",
            "_scaled_dot_product_cudnn_attention",
            "_scaled_dot_product_attention_math",
            "_scaled_dot_product_attention_math_for_mps",
            "_scaled_dot_product_fused_attention_overrideable",
            "scaled_dot_product_attention",
            "_flash_attention_forward",
            "_efficient_attention_forward",
        )
    },
    **{
        p: _rule_attention_backward
        for p in _packets(
            "_scaled_dot_product_flash_attention_for_cpu_backward",
            "_scaled_dot_product_flash_attention_backward",
            "_scaled_dot_product_efficient_attention_backward",
            "_scaled_dot_product_cudnn_attention_backward",
            "_flash_attention_backward",
            "_efficient_attention_backward",
        )
    },
}
