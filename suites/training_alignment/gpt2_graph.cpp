#include "gpt2_graph.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <map>

#include "fusebench/error.hpp"

namespace fusebench::training {

using engine::Graph;
using engine::NodeId;

// ---- parameters
std::vector<ParameterSlot> parameter_layout(const ModelShape& s) {
  if (s.layers < 1 || s.heads < 1 || s.width < 1 || s.context < 1 || s.vocab < 2 ||
      s.width % s.heads != 0) {
    throw_input_error(
        "model: layers {}, heads {}, width {}, context {}, vocab {}: all must be positive and "
        "width a "
        "multiple of heads",
        s.layers, s.heads, s.width, s.context, s.vocab);
  }
  std::vector<ParameterSlot> out;
  std::int64_t offset = 0;
  const std::int64_t c = s.width;
  // GPT-2's initialisation: N(0, 0.02) weights, residual projections scaled by 1/sqrt(2 layers).
  const double residual_std = 0.02 / std::sqrt(2.0 * s.layers);
  auto add = [&](std::string name, Shape shape, bool decay, ParameterSlot::Init init,
                 double stddev = 0.02) {
    ParameterSlot slot{std::move(name), shape, offset, shape_numel(shape), decay, init, stddev};
    offset += slot.numel;
    out.push_back(std::move(slot));
  };
  using I = ParameterSlot::Init;
  add("wte", {s.vocab, c}, true, I::Normal);
  add("wpe", {s.context, c}, true, I::Normal, 0.01);
  for (int l = 0; l < s.layers; ++l) {
    const auto p = [l](const char* what) { return fmt::format("h{}.{}", l, what); };
    add(p("ln1_w"), {c}, false, I::One);
    add(p("ln1_b"), {c}, false, I::Zero);
    add(p("qkv_w"), {c, 3 * c}, true, I::Normal);
    add(p("qkv_b"), {3 * c}, false, I::Zero);
    add(p("proj_w"), {c, c}, true, I::Normal, residual_std);
    add(p("proj_b"), {c}, false, I::Zero);
    add(p("ln2_w"), {c}, false, I::One);
    add(p("ln2_b"), {c}, false, I::Zero);
    add(p("fc_w"), {c, 4 * c}, true, I::Normal);
    add(p("fc_b"), {4 * c}, false, I::Zero);
    add(p("fcproj_w"), {4 * c, c}, true, I::Normal, residual_std);
    add(p("fcproj_b"), {c}, false, I::Zero);
  }
  add("lnf_w", {c}, false, I::One);
  add("lnf_b", {c}, false, I::Zero);
  return out;
}

std::int64_t parameter_count(const std::vector<ParameterSlot>& layout) {
  return layout.empty() ? 0 : layout.back().offset + layout.back().numel;
}

// ---- backward compositions
NodeId layernorm_backward(Graph& g, NodeId x, NodeId w, NodeId dy, double eps, NodeId* dw,
                          NodeId* db) {
  // Statistics recomputed from x (the forward op keeps none): xhat = (x - mean) * rstd.
  const NodeId mean = g.mean(x, -1, true);
  const NodeId centred = g.sub(x, mean);
  const NodeId var = g.mean(g.mul(centred, centred), -1, true);
  const NodeId rstd = g.rsqrt(g.add_scalar(var, eps));
  const NodeId xhat = g.mul(centred, rstd);
  // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * w
  const NodeId dxhat = g.mul(dy, w);
  const NodeId mean_dxhat = g.mean(dxhat, -1, true);
  const NodeId mean_dxhat_xhat = g.mean(g.mul(dxhat, xhat), -1, true);
  const NodeId dx = g.mul(g.sub(g.sub(dxhat, mean_dxhat), g.mul(xhat, mean_dxhat_xhat)), rstd);
  if (dw) *dw = g.sum(g.mul(dy, xhat), 0);
  if (db) *db = g.sum(dy, 0);
  return dx;
}

NodeId softmax_backward(Graph& g, NodeId y, NodeId dy) {
  const NodeId dot = g.sum(g.mul(dy, y), -1, true);
  return g.mul(y, g.sub(dy, dot));
}

NodeId log_softmax(Graph& g, NodeId x) {
  const NodeId shifted = g.sub(x, g.max(x, -1, true));
  return g.sub(shifted, g.log(g.sum(g.exp(shifted), -1, true)));
}

// ---- the model
namespace {

struct Linear {
  NodeId w, b;
};

class ModelBuilder {
 public:
  ModelBuilder(const ModelShape& s, int batch, DType act)
      : s_(s), batch_(batch), act_(act), rows_(std::int64_t(batch) * s.context) {}

  TrainGraph build(bool with_gradients) {
    TrainGraph out;
    Graph& g = out.graph;
    g_ = &g;
    const auto layout = parameter_layout(s_);
    for (const auto& slot : layout) {
      const NodeId master = g.input(slot.name, slot.shape, DType::f32);
      master_[slot.name] = master;
      // Activations' dtype copies of the fp32 master weights, as autocast makes them; norms too.
      param_[slot.name] = act_ == DType::f32 ? master : g.cast(master, act_);
    }
    const std::int64_t v = s_.vocab, c = s_.width, t = s_.context;
    const NodeId tokens = g.input("tokens", {rows_}, DType::i32);  // byte ids
    const NodeId targets = g.input("targets", {rows_, v}, DType::f32);

    // ---- forward
    const NodeId wte = param_.at("wte"), wpe = param_.at("wpe");
    const NodeId tok_emb = g.gather_rows(wte, tokens);  // [N, C]: the embedding rows of the tokens
    NodeId x = g.reshape(g.add(g.reshape(tok_emb, {batch_, t, c}), wpe), {rows_, c});
    std::vector<BlockSaved> saved;
    for (int l = 0; l < s_.layers; ++l) saved.push_back(block_forward(l, x, &x));
    const NodeId x_final_in = x;
    const NodeId xf = g.layernorm(x, param_.at("lnf_w"), param_.at("lnf_b"));
    const NodeId logits = g.matmul(xf, g.transpose(wte, 0, 1));  // tied output projection [N, V]
    const NodeId logits32 = act_ == DType::f32 ? logits : g.cast(logits, DType::f32);
    const NodeId logp = log_softmax(g, logits32);
    const NodeId picked = g.sum(g.mul(targets, logp), -1, false);  // [N]
    out.loss = g.mul_scalar(g.sum(picked, 0, true), -1.0 / double(rows_));
    g.set_name(out.loss, "loss");
    g.mark_output(out.loss);
    if (!with_gradients) return out;

    // ---- backward
    const NodeId seed = g.input("loss_seed", {1}, DType::f32);  // loss scale (fp16) or 1
    // d loss / d logits = (softmax - onehot) * seed / N, fp32, then in the activations' dtype
    NodeId dlogits =
        g.mul(g.sub(g.softmax(logits32), targets), g.mul_scalar(seed, 1.0 / double(rows_)));
    if (act_ != DType::f32) dlogits = g.cast(dlogits, act_);
    std::map<std::string, NodeId> grad;
    grad["wte"] = g.matmul(g.transpose(dlogits, 0, 1), xf);  // [V, C]
    NodeId dx = g.matmul(dlogits, wte);                      // [N, C]
    dx = layernorm_backward(g, x_final_in, param_.at("lnf_w"), dx, 1e-5, &grad["lnf_w"],
                            &grad["lnf_b"]);
    for (int l = s_.layers - 1; l >= 0; --l)
      dx = block_backward(l, saved[std::size_t(l)], dx, grad);
    // embeddings: position rows summed over the batch; token rows added at the tokens' ids (in
    // token order: deterministic), then to the tied head's gradient
    grad["wpe"] = g.sum(g.reshape(dx, {batch_, t, c}), 0);
    grad["wte"] = g.add(grad["wte"], g.scatter_add_rows(dx, tokens, v));
    for (const auto& slot : layout) {
      NodeId gr = grad.at(slot.name);
      if (g.node(gr).dtype != DType::f32) gr = g.cast(gr, DType::f32);
      g.set_name(gr, "grad." + slot.name);
      g.mark_output(gr);
      out.gradients.push_back(gr);
    }
    return out;
  }

 private:
  struct BlockSaved {
    NodeId x_in, h1, q, k, v, probs, attn_rows, x_mid, h2, fc, fc_act;
  };

  std::string p(int layer, const char* what) const { return fmt::format("h{}.{}", layer, what); }

  NodeId linear(NodeId x, int layer, const char* w, const char* b) {
    Graph& g = *g_;
    return g.add(g.matmul(x, param_.at(p(layer, w))), param_.at(p(layer, b)));
  }
  // [N, C] -> [B, H, T, hd]
  NodeId heads(NodeId x) {
    Graph& g = *g_;
    const std::int64_t hd = s_.width / s_.heads;
    return g.permute(g.reshape(x, {batch_, s_.context, s_.heads, hd}), {0, 2, 1, 3});
  }
  // [B, H, T, hd] -> [N, C]
  NodeId merge_heads(NodeId x) {
    Graph& g = *g_;
    return g.reshape(g.permute(x, {0, 2, 1, 3}), {rows_, s_.width});
  }

  BlockSaved block_forward(int l, NodeId x, NodeId* x_out) {
    Graph& g = *g_;
    BlockSaved sv{};
    const std::int64_t c = s_.width;
    const double scale = 1.0 / std::sqrt(double(c / s_.heads));
    sv.x_in = x;
    sv.h1 = g.layernorm(x, param_.at(p(l, "ln1_w")), param_.at(p(l, "ln1_b")));
    const NodeId qkv = linear(sv.h1, l, "qkv_w", "qkv_b");  // [N, 3C]
    sv.q = heads(g.slice(qkv, 1, 0, c));
    sv.k = heads(g.slice(qkv, 1, c, 2 * c));
    sv.v = heads(g.slice(qkv, 1, 2 * c, 3 * c));
    // [B, H, T, T]
    const NodeId scores = g.mul_scalar(g.matmul(sv.q, g.transpose(sv.k, 2, 3)), scale);
    sv.probs = g.softmax(g.causal_mask(scores, -std::numeric_limits<double>::infinity()));
    sv.attn_rows = merge_heads(g.matmul(sv.probs, sv.v));  // [N, C]
    sv.x_mid = g.add(x, linear(sv.attn_rows, l, "proj_w", "proj_b"));
    sv.h2 = g.layernorm(sv.x_mid, param_.at(p(l, "ln2_w")), param_.at(p(l, "ln2_b")));
    sv.fc = linear(sv.h2, l, "fc_w", "fc_b");  // [N, 4C]
    sv.fc_act = g.gelu(sv.fc, true);
    *x_out = g.add(sv.x_mid, linear(sv.fc_act, l, "fcproj_w", "fcproj_b"));
    return sv;
  }

  // y = x W + b: dW = x^T dy, db = sum over rows, returns dx = dy W^T.
  NodeId linear_backward(int l, const char* w, const char* b, NodeId x, NodeId dy,
                         std::map<std::string, NodeId>& grad) {
    Graph& g = *g_;
    grad[p(l, w)] = g.matmul(g.transpose(x, 0, 1), dy);
    grad[p(l, b)] = g.sum(dy, 0);
    return g.matmul(dy, g.transpose(param_.at(p(l, w)), 0, 1));
  }

  NodeId block_backward(int l, const BlockSaved& sv, NodeId dx_out,
                        std::map<std::string, NodeId>& grad) {
    Graph& g = *g_;
    const double scale = 1.0 / std::sqrt(double(s_.width / s_.heads));
    // MLP branch: x_out = x_mid + fcproj(gelu(fc(ln2(x_mid))))
    const NodeId d_act = linear_backward(l, "fcproj_w", "fcproj_b", sv.fc_act, dx_out, grad);
    const NodeId d_fc = g.gelu_tanh_backward(d_act, sv.fc);
    const NodeId d_h2 = linear_backward(l, "fc_w", "fc_b", sv.h2, d_fc, grad);
    const NodeId d_mid =
        g.add(dx_out, layernorm_backward(g, sv.x_mid, param_.at(p(l, "ln2_w")), d_h2, 1e-5,
                                         &grad[p(l, "ln2_w")], &grad[p(l, "ln2_b")]));
    // attention branch: x_mid = x_in + proj(attention(ln1(x_in)))
    const NodeId d_rows = linear_backward(l, "proj_w", "proj_b", sv.attn_rows, d_mid, grad);
    const NodeId d_y = heads(d_rows);                               // [B, H, T, hd]
    const NodeId d_probs = g.matmul(d_y, g.transpose(sv.v, 2, 3));  // [B, H, T, T]
    const NodeId d_v = g.matmul(g.transpose(sv.probs, 2, 3), d_y);  // [B, H, T, hd]
    const NodeId d_masked = softmax_backward(g, sv.probs, d_probs);
    const NodeId d_scores = g.mul_scalar(g.causal_mask(d_masked, 0.0), scale);
    const NodeId d_q = g.matmul(d_scores, sv.k);
    const NodeId d_k = g.matmul(g.transpose(d_scores, 2, 3), sv.q);
    // [N, 3C]
    const NodeId d_qkv = g.concat({merge_heads(d_q), merge_heads(d_k), merge_heads(d_v)}, 1);
    const NodeId d_h1 = linear_backward(l, "qkv_w", "qkv_b", sv.h1, d_qkv, grad);
    return g.add(d_mid, layernorm_backward(g, sv.x_in, param_.at(p(l, "ln1_w")), d_h1, 1e-5,
                                           &grad[p(l, "ln1_w")], &grad[p(l, "ln1_b")]));
  }

  ModelShape s_;
  std::int64_t batch_;
  DType act_;
  std::int64_t rows_;
  Graph* g_ = nullptr;
  std::map<std::string, NodeId> master_, param_;
};
}  // namespace

TrainGraph build_train_graph(const ModelShape& shape, int batch, DType activations,
                             bool with_gradients) {
  if (batch < 1) throw_input_error("model: batch {} must be positive", batch);
  if (!is_floating(activations) || activations == DType::f64) {
    throw_input_error("model: activation dtype {} is not one of f32, bf16, f16",
                      dtype_name(activations));
  }
  return ModelBuilder(shape, batch, activations).build(with_gradients);
}

// ---- optimizer and gradient norm
engine::Graph build_adamw_graph(std::int64_t n, double beta1, double beta2, double eps,
                                double weight_decay) {
  Graph g;
  const NodeId param = g.input("param", {n}, DType::f32);
  const NodeId grad_in = g.input("grad", {n}, DType::f32);
  const NodeId m = g.input("m", {n}, DType::f32);
  const NodeId v = g.input("v", {n}, DType::f32);
  const NodeId decay = g.input("decay_mask", {n}, DType::f32);
  const NodeId lr = g.input("lr", {1}, DType::f32);
  const NodeId grad_scale = g.input("grad_scale", {1}, DType::f32);
  const NodeId inv_bias1 = g.input("inv_bias1", {1}, DType::f32);
  const NodeId inv_bias2 = g.input("inv_bias2", {1}, DType::f32);
  const NodeId grad = g.mul(grad_in, grad_scale);  // unscaled, clipped
  const NodeId m_new = g.add(g.mul_scalar(m, beta1), g.mul_scalar(grad, 1.0 - beta1));
  const NodeId v_new = g.add(g.mul_scalar(v, beta2), g.mul_scalar(g.mul(grad, grad), 1.0 - beta2));
  const NodeId m_hat = g.mul(m_new, inv_bias1);
  const NodeId v_hat = g.mul(v_new, inv_bias2);
  const NodeId update = g.add(g.div(m_hat, g.add_scalar(g.sqrt(v_hat), eps)),
                              g.mul(g.mul_scalar(decay, weight_decay), param));
  const NodeId param_new = g.sub(param, g.mul(lr, update));
  g.set_name(param_new, "param_new");
  g.set_name(m_new, "m_new");
  g.set_name(v_new, "v_new");
  g.mark_output(param_new);
  g.mark_output(m_new);
  g.mark_output(v_new);
  return g;
}

engine::Graph build_sum_of_squares_graph(std::int64_t n) {
  Graph g;
  const NodeId grad = g.input("grad", {n}, DType::f32);
  g.mark_output(g.sum(g.mul(grad, grad), 0, true));
  return g;
}

}  // namespace fusebench::training
