"""More TF1 scripts as well-known repositories wrote them (BERT, GPT-2, GCN, PINN, MAML, speech with CTC, mixture
density and Bayesian layers with tf.distributions, PPO, factorization machines and NCF, detection and segmentation
bits), written once against the TF1 API `tf` and run with TensorFlow's tf.compat.v1 and with tfplus, as
tests/tutorials.py's and tests/zoo.py's scripts: tiny shapes, synthetic data, a few training steps, every random op
fed the same NumPy values (`Feeder`)."""
from __future__ import annotations

import collections
import os
import re
import tempfile

import numpy as np
from tutorials import Feeder, _session_run, _trained, contrib, data
from zoo import _train


class _HParams:
    def __init__(self, **kw):
        self.__dict__.update(kw)


# ---- BERT (google-research/bert: modeling.py, optimization.py) ----------------------------------------------------

def _bert_model(tf, input_ids, input_mask, token_type_ids, is_training, vocab=12, hidden=8, heads=2, layers=1):
    batch_size, seq_length = input_ids.shape.as_list()

    def create_initializer(initializer_range=0.02):
        return tf.truncated_normal_initializer(stddev=initializer_range)

    def gelu(x):
        cdf = 0.5 * (1.0 + tf.erf(x / tf.sqrt(2.0)))
        return x * cdf

    def dropout(t, prob):
        return t if not is_training else tf.nn.dropout(t, 1.0 - prob)

    def layer_norm(t, name=None):
        return contrib(tf).layers.layer_norm(inputs=t, begin_norm_axis=-1, begin_params_axis=-1, scope=name)

    def reshape_to_matrix(t):
        return tf.reshape(t, [-1, t.shape[-1]])

    def transpose_for_scores(t, seq):
        t = tf.reshape(t, [batch_size, seq, heads, hidden // heads])
        return tf.transpose(t, [0, 2, 1, 3])

    with tf.variable_scope("bert"):
        with tf.variable_scope("embeddings"):
            embedding_table = tf.get_variable("word_embeddings", [vocab, hidden], initializer=create_initializer())
            flat_ids = tf.reshape(input_ids, [-1])
            out = tf.reshape(tf.gather(embedding_table, flat_ids), [batch_size, seq_length, hidden])
            token_type_table = tf.get_variable("token_type_embeddings", [2, hidden], initializer=create_initializer())
            one_hot_ids = tf.one_hot(tf.reshape(token_type_ids, [-1]), depth=2)
            out += tf.reshape(tf.matmul(one_hot_ids, token_type_table), [batch_size, seq_length, hidden])
            full_position = tf.get_variable("position_embeddings", [16, hidden], initializer=create_initializer())
            position = tf.slice(full_position, [0, 0], [seq_length, -1])
            out += tf.reshape(position, [1, seq_length, hidden])
            embedding_output = dropout(layer_norm(out, "LayerNorm"), 0.1)
        with tf.variable_scope("encoder"):
            to_mask = tf.cast(tf.reshape(input_mask, [batch_size, 1, seq_length]), tf.float32)
            attention_mask = tf.ones(shape=[batch_size, seq_length, 1], dtype=tf.float32) * to_mask
            prev = reshape_to_matrix(embedding_output)
            for layer in range(layers):
                with tf.variable_scope("layer_%d" % layer):
                    with tf.variable_scope("attention"):
                        with tf.variable_scope("self"):
                            q = tf.layers.dense(prev, hidden, name="query", kernel_initializer=create_initializer())
                            k = tf.layers.dense(prev, hidden, name="key", kernel_initializer=create_initializer())
                            v = tf.layers.dense(prev, hidden, name="value", kernel_initializer=create_initializer())
                            q, k = transpose_for_scores(q, seq_length), transpose_for_scores(k, seq_length)
                            scores = tf.multiply(tf.matmul(q, k, transpose_b=True), 1.0 / np.sqrt(hidden // heads))
                            adder = (1.0 - tf.cast(tf.expand_dims(attention_mask, axis=[1]), tf.float32)) * -10000.0
                            probs = dropout(tf.nn.softmax(scores + adder), 0.1)
                            v = tf.transpose(tf.reshape(v, [batch_size, seq_length, heads, hidden // heads]),
                                             [0, 2, 1, 3])
                            context = tf.transpose(tf.matmul(probs, v), [0, 2, 1, 3])
                            context = tf.reshape(context, [batch_size * seq_length, hidden])
                        with tf.variable_scope("output"):
                            attn = tf.layers.dense(context, hidden, kernel_initializer=create_initializer())
                            attn = layer_norm(dropout(attn, 0.1) + prev)
                    with tf.variable_scope("intermediate"):
                        inter = tf.layers.dense(attn, 2 * hidden, activation=gelu,
                                                kernel_initializer=create_initializer())
                    with tf.variable_scope("output"):
                        out = tf.layers.dense(inter, hidden, kernel_initializer=create_initializer())
                        prev = layer_norm(dropout(out, 0.1) + attn)
            sequence_output = tf.reshape(prev, [batch_size, seq_length, hidden])
        with tf.variable_scope("pooler"):
            first_token_tensor = tf.squeeze(sequence_output[:, 0:1, :], axis=1)
            pooled = tf.layers.dense(first_token_tensor, hidden, activation=tf.tanh,
                                     kernel_initializer=create_initializer())
    return sequence_output, pooled


class _AdamWeightDecay:
    """optimization.py's AdamWeightDecayOptimizer: a tf.train.Optimizer subclass with its own apply_gradients."""

    @staticmethod
    def make(tf):
        class AdamWeightDecayOptimizer(tf.train.Optimizer):
            def __init__(self, learning_rate, weight_decay_rate=0.0, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
                         exclude_from_weight_decay=None, name="AdamWeightDecayOptimizer"):
                super().__init__(False, name)
                self.learning_rate = learning_rate
                self.weight_decay_rate = weight_decay_rate
                self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
                self.exclude_from_weight_decay = exclude_from_weight_decay

            def apply_gradients(self, grads_and_vars, global_step=None, name=None):
                assignments = []
                for grad, param in grads_and_vars:
                    if grad is None or param is None:
                        continue
                    param_name = self._get_variable_name(param.name)
                    m = tf.get_variable(name=param_name + "/adam_m", shape=param.shape.as_list(), dtype=tf.float32,
                                        trainable=False, initializer=tf.zeros_initializer())
                    v = tf.get_variable(name=param_name + "/adam_v", shape=param.shape.as_list(), dtype=tf.float32,
                                        trainable=False, initializer=tf.zeros_initializer())
                    next_m = tf.multiply(self.beta_1, m) + tf.multiply(1.0 - self.beta_1, grad)
                    next_v = tf.multiply(self.beta_2, v) + tf.multiply(1.0 - self.beta_2, tf.square(grad))
                    update = next_m / (tf.sqrt(next_v) + self.epsilon)
                    if self._do_use_weight_decay(param_name):
                        update += self.weight_decay_rate * param
                    next_param = param - self.learning_rate * update
                    assignments.extend([param.assign(next_param), m.assign(next_m), v.assign(next_v)])
                return tf.group(*assignments, name=name)

            def _do_use_weight_decay(self, param_name):
                return not any(re.search(r, param_name) for r in self.exclude_from_weight_decay or ())

            def _get_variable_name(self, param_name):
                m = re.match("^(.*):\\d+$", param_name)
                return m.group(1) if m is not None else param_name
        return AdamWeightDecayOptimizer


def _momentum_subclass(tf):
    """A tf.train.Optimizer subclass the way custom optimizers were written: _prepare, _create_slots with
    _zeros_slot, _apply_dense with get_slot."""
    class SlotMomentum(tf.train.Optimizer):
        def __init__(self, learning_rate, momentum, use_locking=False, name="SlotMomentum"):
            super().__init__(use_locking, name)
            self._lr, self._momentum = learning_rate, momentum

        def _prepare(self):
            self._lr_t = tf.convert_to_tensor(self._lr, name="learning_rate")
            self._momentum_t = tf.convert_to_tensor(self._momentum, name="momentum")

        def _create_slots(self, var_list):
            for v in var_list:
                self._zeros_slot(v, "m", self._name)

        def _apply_dense(self, grad, var):
            m = self.get_slot(var, "m")
            m_t = tf.assign(m, self._momentum_t * m + grad, use_locking=self._use_locking)
            var_update = tf.assign_sub(var, tf.cast(self._lr_t, var.dtype.base_dtype) * m_t)
            return tf.group(var_update, m_t)

        def _apply_sparse(self, grad, var):
            raise NotImplementedError("dense gradients only")
    return SlotMomentum


def _lamb_subclass(tf):
    """A LAMB optimizer as TF1 ports wrote it (ymcui/LAMB_Optimizer_TF style, on tf.train.Optimizer's protected
    API): beta powers by _create_non_slot_variable and _get_non_slot_variable, slots by
    _get_or_make_slot_with_initializer and _zeros_slot, hyperparameters through _call_if_callable, the powers
    advanced in _finish."""
    class LAMBOptimizer(tf.train.Optimizer):
        def __init__(self, learning_rate=0.01, beta1=0.9, beta2=0.999, epsilon=1e-6, weight_decay=0.01,
                     use_locking=False, name="LAMB"):
            super().__init__(use_locking, name)
            self._lr, self._beta1, self._beta2, self._epsilon, self._wd = (learning_rate, beta1, beta2, epsilon,
                                                                            weight_decay)

        def _get_beta_accumulators(self):
            graph = tf.get_default_graph()
            return (self._get_non_slot_variable("beta1_power", graph=graph),
                    self._get_non_slot_variable("beta2_power", graph=graph))

        def _create_slots(self, var_list):
            first_var = min(var_list, key=lambda x: x.name)
            self._create_non_slot_variable(initial_value=self._beta1, name="beta1_power", colocate_with=first_var)
            self._create_non_slot_variable(initial_value=self._beta2, name="beta2_power", colocate_with=first_var)
            for v in var_list:
                self._get_or_make_slot_with_initializer(v, tf.zeros_initializer(), v.shape, v.dtype.base_dtype,
                                                        "m", self._name)
                self._zeros_slot(v, "v", self._name)

        def _prepare(self):
            self._lr_t = tf.convert_to_tensor(self._call_if_callable(self._lr), name="learning_rate")

        def _apply_dense(self, grad, var):
            beta1_power, beta2_power = self._get_beta_accumulators()
            m, v = self.get_slot(var, "m"), self.get_slot(var, "v")
            m_t = tf.assign(m, self._beta1 * m + (1.0 - self._beta1) * grad)
            v_t = tf.assign(v, self._beta2 * v + (1.0 - self._beta2) * tf.square(grad))
            m_hat = m_t / (1.0 - beta1_power)
            v_hat = v_t / (1.0 - beta2_power)
            update = m_hat / (tf.sqrt(v_hat) + self._epsilon) + self._wd * var
            w_norm, g_norm = tf.norm(var, ord=2), tf.norm(update, ord=2)
            ratio = tf.where(tf.greater(w_norm, 0), tf.where(tf.greater(g_norm, 0), w_norm / g_norm, 1.0), 1.0)
            return tf.assign_sub(var, ratio * self._lr_t * update, use_locking=self._use_locking).op

        def _finish(self, update_ops, name_scope):
            with tf.control_dependencies(update_ops):
                beta1_power, beta2_power = self._get_beta_accumulators()
                update_beta1 = beta1_power.assign(beta1_power * self._beta1, use_locking=self._use_locking)
                update_beta2 = beta2_power.assign(beta2_power * self._beta2, use_locking=self._use_locking)
            return tf.group(*update_ops + [update_beta1, update_beta2], name=name_scope)
    return LAMBOptimizer


def bert(tf, feeder):
    """BERT fine-tuning (run_classifier.py): gelu by tf.erf, layer norm, the attention mask, one-hot and gathered
    embeddings, AdamWeightDecay with polynomial decay after a warm-up and clip_by_global_norm, the encoder
    restored from a pre-trained checkpoint by init_from_checkpoint with get_assignment_map_from_checkpoint; then
    the head by a slot-based custom optimizer and the pooler by a LAMB port."""
    batch, seq = 2, 5
    ids, types = data(50, ("i", (batch, seq), 12), ("i", (batch, seq), 2))
    mask = np.array([[1, 1, 1, 1, 0], [1, 1, 1, 0, 0]], np.int32)
    labels_v = np.array([0, 2], np.int32)
    with tempfile.TemporaryDirectory() as ckpt_dir:
        init_checkpoint = os.path.join(ckpt_dir, "bert_model.ckpt")
        with tf.Graph().as_default():   # the "pre-trained" model: deterministic values, saved
            _bert_model(tf, tf.placeholder(tf.int32, [batch, seq]), tf.placeholder(tf.int32, [batch, seq]),
                        tf.placeholder(tf.int32, [batch, seq]), False)
            with tf.Session() as sess:
                for i, v in enumerate(tf.global_variables()):
                    n = int(np.prod(v.shape.as_list()))
                    sess.run(v.initializer, {v.initial_value: np.sin(np.arange(n) + i).reshape(v.shape.as_list())})
                tf.train.Saver().save(sess, init_checkpoint)
        input_ids = tf.placeholder(tf.int32, [batch, seq])
        input_mask = tf.placeholder(tf.int32, [batch, seq])
        segment_ids = tf.placeholder(tf.int32, [batch, seq])
        labels = tf.placeholder(tf.int32, [batch])
        _, output_layer = _bert_model(tf, input_ids, input_mask, segment_ids, True)
        num_labels, hidden_size = 3, output_layer.shape[-1]
        output_weights = tf.get_variable("output_weights", [num_labels, hidden_size],
                                         initializer=tf.truncated_normal_initializer(stddev=0.02))
        output_bias = tf.get_variable("output_bias", [num_labels], initializer=tf.zeros_initializer())
        with tf.variable_scope("loss"):
            output_layer = tf.nn.dropout(output_layer, keep_prob=0.9)
            logits = tf.nn.bias_add(tf.matmul(output_layer, output_weights, transpose_b=True), output_bias)
            probabilities = tf.nn.softmax(logits, axis=-1)
            log_probs = tf.nn.log_softmax(logits, axis=-1)
            one_hot_labels = tf.one_hot(labels, depth=num_labels, dtype=tf.float32)
            per_example_loss = -tf.reduce_sum(one_hot_labels * log_probs, axis=-1)
            loss = tf.reduce_mean(per_example_loss)

        tvars = tf.trainable_variables()
        assignment_map, initialized = collections.OrderedDict(), {}
        name_to_variable = collections.OrderedDict()
        for var in tvars:
            m = re.match("^(.*):\\d+$", var.name)
            name_to_variable[m.group(1) if m else var.name] = var
        for name, _ in tf.train.list_variables(init_checkpoint):
            if name in name_to_variable:
                assignment_map[name] = name
                initialized[name] = 1
                initialized[name + ":0"] = 1
        tf.train.init_from_checkpoint(init_checkpoint, assignment_map)

        init_lr, num_train_steps, num_warmup_steps = 0.05, 6, 2
        global_step = tf.train.get_or_create_global_step()
        learning_rate = tf.constant(value=init_lr, shape=[], dtype=tf.float32)
        learning_rate = tf.train.polynomial_decay(learning_rate, global_step, num_train_steps, end_learning_rate=0.0,
                                                  power=1.0, cycle=False)
        global_steps_int = tf.cast(global_step, tf.int32)
        warmup_steps_int = tf.constant(num_warmup_steps, dtype=tf.int32)
        warmup_percent_done = tf.cast(global_steps_int, tf.float32) / tf.cast(warmup_steps_int, tf.float32)
        warmup_learning_rate = init_lr * warmup_percent_done
        is_warmup = tf.cast(global_steps_int < warmup_steps_int, tf.float32)
        learning_rate = (1.0 - is_warmup) * learning_rate + is_warmup * warmup_learning_rate
        # epsilon 1e-4, not BERT's 1e-6: on gradients near 1e-7 Adam's m / (sqrt(v) + eps) turns float rounding
        # into whole steps (1e-4 apart after four).
        optimizer = _AdamWeightDecay.make(tf)(learning_rate=learning_rate, weight_decay_rate=0.01, epsilon=1e-4,
                                              exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"])
        grads = tf.gradients(loss, tvars)
        grads, global_norm = tf.clip_by_global_norm(grads, clip_norm=1.0)
        train_op = optimizer.apply_gradients(zip(grads, tvars), global_step=global_step)
        # NOTE: BERT groups the increment beside the updates that read the step, a race in TensorFlow (its first
        # step ran with either learning rate): ordered here.
        with tf.control_dependencies([train_op]):
            train_op = tf.group(train_op, [global_step.assign(global_step + 1)])
        head_op = _momentum_subclass(tf)(0.1, 0.9).minimize(loss, var_list=[output_weights, output_bias])
        pooler = [v for v in tvars if "pooler" in v.op.name]
        # epsilon 1e-3: some pooler gradients are 1e-8, where m / (sqrt(v) + eps) turns rounding into steps.
        lamb_op = _lamb_subclass(tf)(lambda: 0.05, epsilon=1e-3).minimize(loss, var_list=pooler)
        feed = {input_ids: ids, input_mask: mask, segment_ids: types, labels: labels_v}
        sess = _session_run(tf, feeder)
        feed.update(feeder.feeds(tf))
        out = {"restored": sess.run(tvars[0]), "loss": [], "lr": [], "global_norm": []}
        for _ in range(4):
            _, lo, lr, gn = sess.run([train_op, loss, learning_rate, global_norm], feed)
            out["loss"].append(lo)
            out["lr"].append(lr)
            out["global_norm"].append(gn)
        for _ in range(2):
            out["loss"].append(sess.run([head_op, loss], feed)[1])
        for _ in range(2):
            out["loss"].append(sess.run([lamb_op, loss], feed)[1])
        out["probabilities"] = sess.run(probabilities, feed)
        out["initialized"] = np.array(sorted(initialized))
        out["slots"] = np.array(sorted(v.op.name for v in tf.global_variables() if "adam_" in v.op.name or
                                       "SlotMomentum" in v.op.name or "LAMB" in v.op.name or "power" in v.op.name))
        out = _trained(tf, sess, {k: np.array(v) for k, v in out.items()})
        sess.close()
        return out


# ---- GPT-2 (openai/gpt-2: src/model.py, src/sample.py) ----------------------------------------------------------

def _gpt2(tf):
    def shape_list(x):
        static = x.shape.as_list()
        dynamic = tf.shape(x)
        return [dynamic[i] if s is None else s for i, s in enumerate(static)]

    def softmax(x, axis=-1):
        x = x - tf.reduce_max(x, axis=axis, keepdims=True)
        ex = tf.exp(x)
        return ex / tf.reduce_sum(ex, axis=axis, keepdims=True)

    def gelu(x):
        return 0.5 * x * (1 + tf.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * tf.pow(x, 3))))

    def norm(x, scope, *, axis=-1, epsilon=1e-5):
        with tf.variable_scope(scope):
            n_state = x.shape.as_list()[-1]
            g = tf.get_variable("g", [n_state], initializer=tf.constant_initializer(1))
            b = tf.get_variable("b", [n_state], initializer=tf.constant_initializer(0))
            u = tf.reduce_mean(x, axis=axis, keepdims=True)
            s = tf.reduce_mean(tf.square(x - u), axis=axis, keepdims=True)
            return (x - u) * tf.rsqrt(s + epsilon) * g + b

    def split_states(x, n):
        *start, m = shape_list(x)
        return tf.reshape(x, start + [n, m // n])

    def merge_states(x):
        *start, a, b = shape_list(x)
        return tf.reshape(x, start + [a * b])

    def conv1d(x, scope, nf, *, w_init_stdev=0.02):
        with tf.variable_scope(scope):
            *start, nx = shape_list(x)
            w = tf.get_variable("w", [1, nx, nf], initializer=tf.random_normal_initializer(stddev=w_init_stdev))
            b = tf.get_variable("b", [nf], initializer=tf.constant_initializer(0))
            return tf.reshape(tf.matmul(tf.reshape(x, [-1, nx]), tf.reshape(w, [-1, nf])) + b, start + [nf])

    def attention_mask(nd, ns, *, dtype):
        i = tf.range(nd)[:, None]
        j = tf.range(ns)
        return tf.cast(i >= j - ns + nd, dtype)

    def attn(x, scope, n_state, *, past, hparams):
        def split_heads(x):
            return tf.transpose(split_states(x, hparams.n_head), [0, 2, 1, 3])

        def merge_heads(x):
            return merge_states(tf.transpose(x, [0, 2, 1, 3]))

        def mask_attn_weights(w):
            _, _, nd, ns = shape_list(w)
            b = tf.reshape(attention_mask(nd, ns, dtype=w.dtype), [1, 1, nd, ns])
            return w * b - tf.cast(1e10, w.dtype) * (1 - b)

        def multihead_attn(q, k, v):
            w = tf.matmul(q, k, transpose_b=True)
            w = w * tf.rsqrt(tf.cast(v.shape.as_list()[-1], w.dtype))
            return tf.matmul(softmax(mask_attn_weights(w)), v)

        with tf.variable_scope(scope):
            c = conv1d(x, "c_attn", n_state * 3)
            q, k, v = map(split_heads, tf.split(c, 3, axis=2))
            present = tf.stack([k, v], axis=1)
            if past is not None:
                pk, pv = tf.unstack(past, axis=1)
                k = tf.concat([pk, k], axis=-2)
                v = tf.concat([pv, v], axis=-2)
            return conv1d(merge_heads(multihead_attn(q, k, v)), "c_proj", n_state), present

    def block(x, scope, *, past, hparams):
        with tf.variable_scope(scope):
            nx = x.shape.as_list()[-1]
            a, present = attn(norm(x, "ln_1"), "attn", nx, past=past, hparams=hparams)
            x = x + a
            m = conv1d(gelu(conv1d(norm(x, "ln_2"), "c_fc", nx * 4)), "c_proj", nx)
            return x + m, present

    def past_shape(*, hparams, batch_size=None, sequence=None):
        return [batch_size, hparams.n_layer, 2, hparams.n_head, sequence, hparams.n_embd // hparams.n_head]

    def expand_tile(value, size):
        value = tf.convert_to_tensor(value, name="value")
        return tf.tile(tf.expand_dims(value, axis=0), [size] + [1] * value.shape.ndims)

    def positions_for(tokens, past_length):
        return expand_tile(past_length + tf.range(tf.shape(tokens)[1]), tf.shape(tokens)[0])

    def model(hparams, X, past=None, scope="model", reuse=False):
        with tf.variable_scope(scope, reuse=reuse):
            results = {}
            batch, sequence = shape_list(X)
            wpe = tf.get_variable("wpe", [hparams.n_ctx, hparams.n_embd],
                                  initializer=tf.random_normal_initializer(stddev=0.01))
            wte = tf.get_variable("wte", [hparams.n_vocab, hparams.n_embd],
                                  initializer=tf.random_normal_initializer(stddev=0.02))
            past_length = 0 if past is None else tf.shape(past)[-2]
            h = tf.gather(wte, X) + tf.gather(wpe, positions_for(X, past_length))
            presents = []
            pasts = tf.unstack(past, axis=1) if past is not None else [None] * hparams.n_layer
            for layer, layer_past in enumerate(pasts):
                h, present = block(h, "h%d" % layer, past=layer_past, hparams=hparams)
                presents.append(present)
            results["present"] = tf.stack(presents, axis=1)
            h = norm(h, "ln_f")
            logits = tf.matmul(tf.reshape(h, [batch * sequence, hparams.n_embd]), wte, transpose_b=True)
            results["logits"] = tf.reshape(logits, [batch, sequence, hparams.n_vocab])
            return results

    def top_k_logits(logits, k):
        if k == 0:
            return logits

        def _top_k():
            values, _ = tf.nn.top_k(logits, k=k)
            min_values = values[:, -1, tf.newaxis]
            return tf.where(logits < min_values, tf.ones_like(logits, dtype=logits.dtype) * -1e10, logits)
        return tf.cond(tf.equal(k, 0), lambda: logits, lambda: _top_k())

    def sample_sequence(*, hparams, length, batch_size, context, temperature=1, top_k=0):
        def step(tokens, past=None):
            lm_output = model(hparams=hparams, X=tokens, past=past, reuse=tf.AUTO_REUSE)
            presents = lm_output["present"]
            presents.set_shape(past_shape(hparams=hparams, batch_size=batch_size))
            return {"logits": lm_output["logits"][:, :, :hparams.n_vocab], "presents": presents}

        with tf.name_scope("sample_sequence"):
            def body(past, prev, output):
                next_outputs = step(prev, past=past)
                logits = next_outputs["logits"][:, -1, :] / tf.cast(temperature, tf.float32)
                logits = top_k_logits(logits, k=top_k)
                samples = tf.random.categorical(logits, num_samples=1, dtype=tf.int32)
                return [next_outputs["presents"] if past is None else tf.concat([past, next_outputs["presents"]],
                                                                                 axis=-2),
                        samples, tf.concat([output, samples], axis=1)]

            past, prev, output = body(None, context, context)
            _, _, tokens = tf.while_loop(
                cond=lambda *args: True, body=body, maximum_iterations=length - 1,
                loop_vars=[past, prev, output],
                shape_invariants=[tf.TensorShape(past_shape(hparams=hparams, batch_size=batch_size)),
                                  tf.TensorShape([batch_size, None]), tf.TensorShape([batch_size, None])],
                back_prop=False)
            return tokens
    return model, sample_sequence


def gpt2(tf, feeder):
    """GPT-2: a language-model step (train.py's loss) and sampling with past keys and values in a tf.while_loop,
    top-k filtering by tf.nn.top_k and tf.random.categorical (k=1: the same tokens in both runs)."""
    hparams = _HParams(n_vocab=11, n_ctx=12, n_embd=8, n_head=2, n_layer=1)
    model, sample_sequence = _gpt2(tf)
    context = tf.placeholder(tf.int32, [2, None])
    output = model(hparams=hparams, X=context)
    loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=context[:, 1:],
                                                                         logits=output["logits"][:, :-1]))
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss, var_list=tf.trainable_variables("model"))
    tokens = sample_sequence(hparams=hparams, length=4, batch_size=2, context=context, top_k=1)
    top_v, top_i = tf.nn.top_k(output["logits"][:, -1], k=3)
    full = model(hparams=hparams, X=tokens, reuse=True)["logits"]
    ctx = data(51, ("i", (2, 5), 11))[0]
    sess = _session_run(tf, feeder)
    out = {"loss": [sess.run([train_op, loss], {context: ctx})[1] for _ in range(2)]}
    out["tokens"], out["top_v"], out["top_i"] = sess.run([tokens, top_v, top_i], {context: ctx})
    out["full_logits"] = sess.run(full, {context: ctx})
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


# ---- GCN (tkipf/gcn: layers.py, models.py, train.py) -----------------------------------------------------------

def _sparse_tuple(matrix):
    coords = np.argwhere(matrix != 0).astype(np.int64)
    return coords, matrix[matrix != 0].astype(np.float32), np.array(matrix.shape, np.int64)


def gcn(tf, feeder):
    """Kipf's GCN: sparse features and a sparse normalized adjacency fed to tf.sparse_placeholders, sparse
    dropout by sparse_retain, sparse_tensor_dense_matmul, weight decay on the first layer, a masked loss."""
    nodes, feats, hidden, classes = 8, 5, 4, 3   # 8 nodes and 8 non-zero features: Feeder's batch
    rng = np.random.RandomState(52)
    features = np.zeros((nodes, feats), np.float32)
    features[np.arange(nodes), [0, 2, 1, 3, 4, 0, 2, 4]] = 1.0
    features /= features.sum(1, keepdims=True)
    adj = (rng.uniform(size=(nodes, nodes)) > 0.6).astype(np.float32)
    adj = np.maximum(adj, adj.T) + np.eye(nodes, dtype=np.float32)
    d = 1.0 / np.sqrt(adj.sum(1))
    support = adj * d[:, None] * d[None, :]
    y = np.eye(classes, dtype=np.float32)[rng.randint(0, classes, nodes)]
    train_mask = np.array([1, 1, 0, 1, 0, 1, 1, 0], bool)

    def glorot(shape, name=None):
        init_range = np.sqrt(6.0 / (shape[0] + shape[1]))
        return tf.Variable(tf.random_uniform(shape, minval=-init_range, maxval=init_range, dtype=tf.float32),
                           name=name)

    def sparse_dropout(x, keep_prob, noise_shape):
        random_tensor = keep_prob
        random_tensor += tf.random_uniform(noise_shape)
        dropout_mask = tf.cast(tf.floor(random_tensor), dtype=tf.bool)
        return tf.sparse_retain(x, dropout_mask) * (1. / keep_prob)

    def dot(x, y, sparse=False):
        return tf.sparse_tensor_dense_matmul(x, y) if sparse else tf.matmul(x, y)

    placeholders = {
        "support": [tf.sparse_placeholder(tf.float32)],
        "features": tf.sparse_placeholder(tf.float32, shape=tf.constant([nodes, feats], dtype=tf.int64)),
        "labels": tf.placeholder(tf.float32, shape=(None, classes)),
        "labels_mask": tf.placeholder(tf.int32),
        "dropout": tf.placeholder_with_default(0., shape=()),
        "num_features_nonzero": tf.placeholder(tf.int32, [1]),   # fed features[1].shape
    }

    def graph_conv(x, in_dim, out_dim, name, sparse_inputs, act):
        with tf.variable_scope(name + "_vars"):
            w = glorot([in_dim, out_dim], name="weights_0")
        if sparse_inputs:
            x = sparse_dropout(x, 1 - placeholders["dropout"], placeholders["num_features_nonzero"])
        else:
            x = tf.nn.dropout(x, 1 - placeholders["dropout"])
        pre_sup = dot(x, w, sparse=sparse_inputs)
        out = tf.add_n([dot(placeholders["support"][0], pre_sup, sparse=True)])
        return act(out), w

    h, w0 = graph_conv(placeholders["features"], feats, hidden, "gc1", True, tf.nn.relu)
    outputs, _ = graph_conv(h, hidden, classes, "gc2", False, lambda x: x)
    loss = 5e-4 * tf.nn.l2_loss(w0)
    per = tf.nn.softmax_cross_entropy_with_logits(logits=outputs, labels=placeholders["labels"])
    mask = tf.cast(placeholders["labels_mask"], dtype=tf.float32)
    mask /= tf.reduce_mean(mask)
    loss += tf.reduce_mean(per * mask)
    correct = tf.cast(tf.equal(tf.argmax(outputs, 1), tf.argmax(placeholders["labels"], 1)), tf.float32)
    accuracy = tf.reduce_mean(correct * mask)
    opt_op = tf.train.AdamOptimizer(learning_rate=0.01).minimize(loss)
    prediction = tf.nn.softmax(outputs)
    feats_sparse = _sparse_tuple(features)
    feed = {placeholders["features"]: feats_sparse, placeholders["support"][0]: _sparse_tuple(support),
            placeholders["labels"]: y, placeholders["labels_mask"]: train_mask,
            placeholders["num_features_nonzero"]: feats_sparse[1].shape}
    sess = _session_run(tf, feeder)
    train_feed = {**feed, placeholders["dropout"]: 0.5, **feeder.feeds(tf)}
    out = {"loss": [sess.run([opt_op, loss], train_feed)[1] for _ in range(3)]}
    out["accuracy"], out["prediction"] = sess.run([accuracy, prediction], feed)
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


# ---- PINN (maziarraissi/PINNs: Burgers' equation, continuous inference) -----------------------------------------

def _pinn(tf, feeder, dtype):
    layers = [2, 4, 4, 1]
    lb, ub, nu = np.array([-1.0, 0.0]), np.array([1.0, 1.0]), 0.01 / np.pi

    def xavier_init(size):
        in_dim, out_dim = size
        xavier_stddev = np.sqrt(2 / (in_dim + out_dim))
        return tf.Variable(tf.cast(tf.truncated_normal([in_dim, out_dim], stddev=xavier_stddev), dtype), dtype=dtype)

    weights = [xavier_init([layers[i], layers[i + 1]]) for i in range(len(layers) - 1)]
    biases = [tf.Variable(tf.zeros([1, layers[i + 1]], dtype=dtype), dtype=dtype) for i in range(len(layers) - 1)]

    def neural_net(X):
        H = 2.0 * (X - lb) / (ub - lb) - 1.0
        for W, b in zip(weights[:-1], biases[:-1]):
            H = tf.tanh(tf.add(tf.matmul(H, W), b))
        return tf.add(tf.matmul(H, weights[-1]), biases[-1])

    def net_u(x, t):
        return neural_net(tf.concat([x, t], 1))

    def net_f(x, t):
        u = net_u(x, t)
        u_t = tf.gradients(u, t)[0]
        u_x = tf.gradients(u, x)[0]
        u_xx = tf.gradients(u_x, x)[0]
        return u_t + u * u_x - nu * u_xx

    x_u_tf = tf.placeholder(dtype, shape=[None, 1])
    t_u_tf = tf.placeholder(dtype, shape=[None, 1])
    u_tf = tf.placeholder(dtype, shape=[None, 1])
    x_f_tf = tf.placeholder(dtype, shape=[None, 1])
    t_f_tf = tf.placeholder(dtype, shape=[None, 1])
    u_pred = net_u(x_u_tf, t_u_tf)
    f_pred = net_f(x_f_tf, t_f_tf)
    loss = tf.reduce_mean(tf.square(u_tf - u_pred)) + tf.reduce_mean(tf.square(f_pred))
    train_op_Adam = tf.train.AdamOptimizer(0.01).minimize(loss)
    point = tf.placeholder(dtype, [2])
    hess = tf.hessians(tf.reduce_sum(neural_net(tf.reshape(point, [1, 2]))), point)[0]
    hess_w = tf.hessians(loss, weights[-1])[0]
    x_u, t_u, x_f, t_f = data(53, ("f", (4, 1)), ("f", (4, 1)), ("f", (6, 1)), ("f", (6, 1)))
    cast = dtype.as_numpy_dtype
    feed = {x_u_tf: x_u.astype(cast) * 2 - 1, t_u_tf: t_u.astype(cast), u_tf: -np.sin(np.pi * x_u).astype(cast),
            x_f_tf: x_f.astype(cast) * 2 - 1, t_f_tf: t_f.astype(cast)}
    sess = _session_run(tf, feeder)
    out = {"loss": [sess.run([train_op_Adam, loss], feed)[1] for _ in range(2)]}
    out["f"] = sess.run(f_pred, feed)
    out["hessian"] = sess.run(hess, {point: np.array([0.3, 0.6], cast)})
    out["hessian_w"] = sess.run(hess_w, feed)
    out["dtype"] = np.array(str(sess.run(loss, feed).dtype))
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


def pinn_float32(tf, feeder):
    return _pinn(tf, feeder, tf.float32)


def pinn_float64(tf, feeder):
    return _pinn(tf, feeder, tf.float64)


# ---- MAML (cbfinn/maml: maml.py, sinusoid regression) ----------------------------------------------------------

def maml(tf, feeder):
    """MAML on sinusoids: per-task inner updates as tensors (w - lr * grad) inside tf.map_fn over the meta-batch,
    the outer Adam step differentiating through them (second order)."""
    dim_hidden, update_lr, num_updates, meta_batch = [8, 8], 0.01, 2, 2
    inputa = tf.placeholder(tf.float32, [meta_batch, 3, 1])
    inputb = tf.placeholder(tf.float32, [meta_batch, 3, 1])
    labela = tf.placeholder(tf.float32, [meta_batch, 3, 1])
    labelb = tf.placeholder(tf.float32, [meta_batch, 3, 1])
    weights = {}
    weights["w1"] = tf.Variable(tf.truncated_normal([1, dim_hidden[0]], stddev=0.01))
    weights["b1"] = tf.Variable(tf.zeros([dim_hidden[0]]))
    weights["w2"] = tf.Variable(tf.truncated_normal([dim_hidden[0], dim_hidden[1]], stddev=0.01))
    weights["b2"] = tf.Variable(tf.zeros([dim_hidden[1]]))
    weights["w3"] = tf.Variable(tf.truncated_normal([dim_hidden[1], 1], stddev=0.01))
    weights["b3"] = tf.Variable(tf.zeros([1]))

    def forward(inp, w):
        hidden = tf.nn.relu(tf.matmul(inp, w["w1"]) + w["b1"])
        hidden = tf.nn.relu(tf.matmul(hidden, w["w2"]) + w["b2"])
        return tf.matmul(hidden, w["w3"]) + w["b3"]

    def loss_func(pred, label):
        return tf.reduce_mean(tf.square(pred - label))

    def task_metalearn(inp):
        inputa, inputb, labela, labelb = inp
        task_outputbs, task_lossesb = [], []
        task_outputa = forward(inputa, weights)
        task_lossa = loss_func(task_outputa, labela)
        grads = tf.gradients(task_lossa, list(weights.values()))
        gradients = dict(zip(weights.keys(), grads))
        fast_weights = dict(zip(weights.keys(), [weights[k] - update_lr * gradients[k] for k in weights.keys()]))
        output = forward(inputb, fast_weights)
        task_outputbs.append(output)
        task_lossesb.append(loss_func(output, labelb))
        for _ in range(num_updates - 1):
            loss = loss_func(forward(inputa, fast_weights), labela)
            grads = tf.gradients(loss, list(fast_weights.values()))
            gradients = dict(zip(fast_weights.keys(), grads))
            fast_weights = dict(zip(fast_weights.keys(),
                                    [fast_weights[k] - update_lr * gradients[k] for k in fast_weights.keys()]))
            output = forward(inputb, fast_weights)
            task_outputbs.append(output)
            task_lossesb.append(loss_func(output, labelb))
        return [task_outputa, task_outputbs, task_lossa, task_lossesb]

    out_dtype = [tf.float32, [tf.float32] * num_updates, tf.float32, [tf.float32] * num_updates]
    outputas, outputbs, lossesa, lossesb = tf.map_fn(task_metalearn, elems=(inputa, inputb, labela, labelb),
                                                     dtype=out_dtype, parallel_iterations=meta_batch)
    total_loss1 = tf.reduce_sum(lossesa) / tf.to_float(meta_batch)
    total_losses2 = [tf.reduce_sum(lossesb[j]) / tf.to_float(meta_batch) for j in range(num_updates)]
    optimizer = tf.train.AdamOptimizer(0.01)
    gvs = optimizer.compute_gradients(total_losses2[num_updates - 1])
    metatrain_op = optimizer.apply_gradients(gvs)
    amp, phase = np.array([1.0, 3.0]), np.array([0.0, 1.0])
    xa, xb = data(54, ("f", (meta_batch, 3, 1)), ("f", (meta_batch, 3, 1)))
    xa, xb = xa * 10 - 5, xb * 10 - 5
    ya = amp[:, None, None] * np.sin(xa - phase[:, None, None])
    yb = amp[:, None, None] * np.sin(xb - phase[:, None, None])
    feed = {inputa: xa, inputb: xb, labela: ya.astype(np.float32), labelb: yb.astype(np.float32)}
    sess = _session_run(tf, feeder)
    out = {"loss": [], "pre": []}
    for _ in range(3):
        _, pre, post = sess.run([metatrain_op, total_loss1, total_losses2], feed)
        out["pre"].append(pre)
        out["loss"].append(post)
    out["grads"] = sess.run([g for g, _ in gvs], feed)[0]
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


# ---- Speech: features by tf.signal, a CTC loss, greedy decoding, edit distance ----------------------------------

def _sparse_tuple_from(sequences):
    """The CTC examples' sparse_tuple_from: a list of label lists as (indices, values, dense_shape)."""
    indices = [(n, i) for n, seq in enumerate(sequences) for i in range(len(seq))]
    values = [v for seq in sequences for v in seq]
    shape = [len(sequences), max(len(s) for s in sequences)]
    return np.array(indices, np.int64), np.array(values, np.int32), np.array(shape, np.int64)


def speech_features(tf, feeder):
    """tf.signal's log-mel MFCC recipe (its API docs' example): STFT, mel weights, MFCCs."""
    batch, samples, sample_rate = 2, 256, 8000
    signals = tf.placeholder(tf.float32, [batch, samples])
    stfts = tf.signal.stft(signals, frame_length=64, frame_step=32, fft_length=64)
    spectrograms = tf.abs(stfts)
    num_spectrogram_bins = stfts.shape.as_list()[-1]
    linear_to_mel = tf.signal.linear_to_mel_weight_matrix(12, num_spectrogram_bins, sample_rate, 80.0, 3800.0)
    mel_spectrograms = tf.tensordot(spectrograms, linear_to_mel, 1)
    mel_spectrograms.set_shape(spectrograms.shape[:-1].concatenate(linear_to_mel.shape[-1:]))
    log_mel_spectrograms = tf.log(mel_spectrograms + 1e-6)
    mfccs = tf.signal.mfccs_from_log_mel_spectrograms(log_mel_spectrograms)[..., :8]
    t = np.arange(samples) / sample_rate
    sig = np.stack([np.sin(2 * np.pi * 440 * t), np.sin(2 * np.pi * 1200 * t) * np.hanning(samples)])
    sig = (sig + 0.1 * data(55, ("n", (batch, samples)))[0]).astype(np.float32)
    with tf.Session() as sess:
        out = sess.run({"mfccs": mfccs, "spectrogram": spectrograms, "mel": linear_to_mel}, {signals: sig})
    return out


def speech_ctc(tf, feeder):
    """A speech recognizer trained with CTC (igormq/ctc_tensorflow_example): features fed per frame, a
    recurrent layer and a dense one, tf.nn.ctc_loss with SparseTensor labels (TF1 signature, time-major),
    ctc_greedy_decoder and the label error rate by tf.edit_distance."""
    batch, frames, feats, num_classes = 2, 7, 8, 5
    inputs = tf.placeholder(tf.float32, [None, None, feats])
    targets = tf.sparse_placeholder(tf.int32)
    seq_len = tf.placeholder(tf.int32, [None])
    cell = tf.nn.rnn_cell.LSTMCell(6, state_is_tuple=True)
    outputs, _ = tf.nn.dynamic_rnn(cell, inputs, seq_len, dtype=tf.float32)
    shape = tf.shape(inputs)
    batch_s = shape[0]
    outputs = tf.reshape(outputs, [-1, 6])
    W = tf.Variable(tf.truncated_normal([6, num_classes], stddev=0.1))
    b = tf.Variable(tf.constant(0., shape=[num_classes]))
    logits = tf.reshape(tf.matmul(outputs, W) + b, [batch_s, -1, num_classes])
    logits = tf.transpose(logits, (1, 0, 2))
    loss = tf.nn.ctc_loss(targets, logits, seq_len)
    cost = tf.reduce_mean(loss)
    optimizer = tf.train.MomentumOptimizer(0.05, 0.9).minimize(cost)
    decoded, log_prob = tf.nn.ctc_greedy_decoder(logits, seq_len)
    ler = tf.reduce_mean(tf.edit_distance(tf.cast(decoded[0], tf.int32), targets))
    dense_decoded = tf.sparse_tensor_to_dense(decoded[0], default_value=-1)
    collapsed = tf.nn.ctc_loss(targets, logits, seq_len, preprocess_collapse_repeated=True, ctc_merge_repeated=False)
    batch_major = tf.nn.ctc_loss(targets, tf.transpose(logits, (1, 0, 2)), seq_len, time_major=False)
    unmerged, unmerged_p = tf.nn.ctc_greedy_decoder(logits * 3.0, seq_len, merge_repeated=False)
    grad_logits = tf.gradients(cost, logits)[0]
    xs = data(55, ("n", (batch, frames, feats)))[0]
    feed = {inputs: xs, targets: _sparse_tuple_from([[1, 2, 2], [3]]), seq_len: [frames, frames - 2]}
    sess = _session_run(tf, feeder)
    out = {"grad_logits": sess.run(grad_logits, feed)}
    out["loss"] = [sess.run([optimizer, cost], feed)[1] for _ in range(4)]
    (out["ler"], out["decoded"], out["log_prob"], out["collapsed"], out["batch_major"], out["unmerged"],
     out["unmerged_p"]) = sess.run([ler, dense_decoded, log_prob, collapsed, batch_major,
                                    tf.sparse_tensor_to_dense(unmerged[0], default_value=-1), unmerged_p], feed)
    hyp = tf.SparseTensor([[0, 0, 0], [0, 0, 1], [1, 0, 0]], ["a", "b", "c"], [2, 1, 2])
    truth = tf.SparseTensor([[0, 0, 0], [1, 0, 0], [1, 0, 1]], ["a", "c", "d"], [2, 1, 3])
    out["edit"] = sess.run([tf.edit_distance(hyp, truth), tf.edit_distance(hyp, truth, normalize=False)])
    return _trained(tf, sess, {k: np.array(v) for k, v in out.items()})


# ---- Mixture density network and a Bayesian layer with tf.distributions ----------------------------------------

def mdn_bayes(tf, feeder):
    """A mixture density network (hardmaru's MDN with tf.distributions) and a Bayes-by-backprop layer: Normal,
    Categorical and Bernoulli log_prob, entropy, mean and stddev, kl_divergence, reparameterized samples."""
    tfd = tf.distributions
    K = 3
    x = tf.placeholder(tf.float32, [8, 1])
    y = tf.placeholder(tf.float32, [8, 1])
    hidden = tf.layers.dense(x, 8, activation=tf.nn.tanh)
    out = tf.layers.dense(hidden, 3 * K)
    logits, mu, log_sigma = tf.split(out, 3, axis=1)
    sigma = tf.exp(log_sigma)
    cat = tfd.Categorical(logits=logits)
    normal = tfd.Normal(loc=mu, scale=sigma)
    log_p = tf.reduce_logsumexp(tf.nn.log_softmax(logits) + normal.log_prob(y), axis=1)
    mdn_loss = -tf.reduce_mean(log_p)

    w_mu = tf.Variable(tf.truncated_normal([1, 2], stddev=0.1))
    w_rho = tf.Variable(tf.constant(-3.0, shape=[1, 2]))
    q = tfd.Normal(loc=w_mu, scale=tf.nn.softplus(w_rho))
    prior = tfd.Normal(loc=0.0, scale=1.0)
    w = q.sample(seed=1)
    kl = tf.reduce_sum(tfd.kl_divergence(q, prior))
    labels = tf.placeholder(tf.float32, [None, 2])
    likelihood = tfd.Bernoulli(logits=tf.matmul(x, w))
    nll = -tf.reduce_mean(tf.reduce_sum(likelihood.log_prob(labels), 1))
    loss = mdn_loss + nll + kl / 8.0
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    draws = normal.sample(2, seed=3)
    coin = likelihood.sample(seed=4)
    picks = cat.sample(5, seed=5)
    xs, ys, ls = data(56, ("n", (8, 1)), ("n", (8, 1)), ("i", (8, 2), 2))
    feed = {x: xs, y: ys, labels: ls.astype(np.float32)}
    sess = _session_run(tf, feeder)
    feed.update(feeder.feeds(tf))
    res = {"loss": [sess.run([train_op, loss], feed)[1] for _ in range(3)]}
    names = ("entropy", "cat_probs", "cat_log_prob", "normal_entropy", "cdf", "prob", "stddev", "mean", "kl",
             "b_mean", "b_entropy", "draws", "coin")
    fetch = (cat.entropy(), cat.probs, cat.log_prob(tf.constant([0, 1, 2, 0, 1, 2, 0, 1])), normal.entropy(),
             normal.cdf(y), normal.prob(y), normal.stddev(), normal.mean(), kl, likelihood.mean(),
             likelihood.entropy(), draws, coin)
    res.update(zip(names, sess.run(fetch, feed)))
    picked = sess.run(picks, feed)
    res["picks"] = np.array([picked.shape, [picked.min() >= 0, picked.max() < K]]).ravel()
    return _trained(tf, sess, {k: np.array(v) for k, v in res.items()})


# ---- PPO (openai/baselines: ppo2/model.py, common/distributions.py, ppo1's old-policy assign) -------------------

def ppo(tf, feeder):
    state = np.random.get_state()   # the script seeds NumPy's global generator: the caller's is put back
    try:
        return _ppo(tf, feeder)
    finally:
        np.random.set_state(state)


def _ppo(tf, feeder):
    """PPO's losses: a categorical policy's neglogp, entropy and KL written as baselines' CategoricalPd, the
    clipped ratio and value losses, Adam on clipped gradients, an old policy copied by tf.assign, and steps run
    through tf.get_default_session."""
    np.random.seed(57)   # baselines' ortho_init draws from NumPy's global generator

    def ortho_init(scale=1.0):
        def _ortho_init(shape, dtype, partition_info=None):
            a = np.random.normal(0.0, 1.0, (shape[0], shape[1]))
            u, _, v = np.linalg.svd(a, full_matrices=False)
            q = u if u.shape == (shape[0], shape[1]) else v
            return (scale * q).astype(np.float32)
        return _ortho_init

    def fc(x, scope, nh, *, init_scale=1.0, init_bias=0.0):
        with tf.variable_scope(scope):
            nin = x.get_shape().as_list()[1]
            w = tf.get_variable("w", [nin, nh], initializer=ortho_init(init_scale))
            b = tf.get_variable("b", [nh], initializer=tf.constant_initializer(init_bias))
            return tf.matmul(x, w) + b

    class CategoricalPd:
        def __init__(self, logits):
            self.logits = logits

        def mode(self):
            return tf.argmax(self.logits, axis=-1)

        def neglogp(self, x):
            return tf.nn.softmax_cross_entropy_with_logits_v2(
                logits=self.logits, labels=tf.one_hot(x, self.logits.get_shape().as_list()[-1]))

        def kl(self, other):
            a0 = self.logits - tf.reduce_max(self.logits, axis=-1, keepdims=True)
            a1 = other.logits - tf.reduce_max(other.logits, axis=-1, keepdims=True)
            ea0, ea1 = tf.exp(a0), tf.exp(a1)
            z0 = tf.reduce_sum(ea0, axis=-1, keepdims=True)
            z1 = tf.reduce_sum(ea1, axis=-1, keepdims=True)
            return tf.reduce_sum(ea0 / z0 * (a0 - tf.log(z0) - a1 + tf.log(z1)), axis=-1)

        def entropy(self):
            a0 = self.logits - tf.reduce_max(self.logits, axis=-1, keepdims=True)
            ea0 = tf.exp(a0)
            z0 = tf.reduce_sum(ea0, axis=-1, keepdims=True)
            return tf.reduce_sum(ea0 / z0 * (tf.log(z0) - a0), axis=-1)

        def sample(self):
            u = tf.random_uniform(tf.shape(self.logits), dtype=self.logits.dtype)
            return tf.argmax(self.logits - tf.log(-tf.log(u)), axis=-1)

    nact = 3
    X = tf.placeholder(tf.float32, [None, 4], name="Ob")

    def policy(scope):
        with tf.variable_scope(scope):
            h1 = tf.tanh(fc(X, "pi_fc1", 16, init_scale=np.sqrt(2)))
            pd = CategoricalPd(fc(h1, "pi", nact, init_scale=0.01))
            vf = fc(tf.tanh(fc(X, "vf_fc1", 16, init_scale=np.sqrt(2))), "vf", 1)[:, 0]
            return pd, vf

    pd, vf = policy("ppo2_model")
    oldpd, _ = policy("oldpi")
    action = pd.sample()
    A = tf.placeholder(tf.int32, [None])
    ADV, R, OLDNEGLOGPAC, OLDVPRED = (tf.placeholder(tf.float32, [None]) for _ in range(4))
    LR, CLIPRANGE = tf.placeholder(tf.float32, []), tf.placeholder(tf.float32, [])
    neglogpac = pd.neglogp(A)
    entropy = tf.reduce_mean(pd.entropy())
    vpredclipped = OLDVPRED + tf.clip_by_value(vf - OLDVPRED, -CLIPRANGE, CLIPRANGE)
    vf_loss = .5 * tf.reduce_mean(tf.maximum(tf.square(vf - R), tf.square(vpredclipped - R)))
    ratio = tf.exp(OLDNEGLOGPAC - neglogpac)
    pg_losses = -ADV * ratio
    pg_losses2 = -ADV * tf.clip_by_value(ratio, 1.0 - CLIPRANGE, 1.0 + CLIPRANGE)
    pg_loss = tf.reduce_mean(tf.maximum(pg_losses, pg_losses2))
    approxkl = .5 * tf.reduce_mean(tf.square(neglogpac - OLDNEGLOGPAC))
    clipfrac = tf.reduce_mean(tf.to_float(tf.greater(tf.abs(ratio - 1.0), CLIPRANGE)))
    loss = pg_loss - entropy * 0.01 + vf_loss * 0.5
    meankl = tf.reduce_mean(oldpd.kl(pd))
    params = tf.trainable_variables("ppo2_model")
    trainer = tf.train.AdamOptimizer(learning_rate=LR, epsilon=1e-5)
    grads, var = zip(*trainer.compute_gradients(loss, params))
    grads, grad_norm = tf.clip_by_global_norm(grads, 0.5)
    train_op = trainer.apply_gradients(list(zip(grads, var)))
    assign_old_eq_new = tf.group(*[tf.assign(old, new) for old, new in
                                   zip(tf.global_variables("oldpi"), tf.global_variables("ppo2_model"))])

    def step(obs):
        sess = tf.get_default_session()
        return sess.run([action, vf, pd.neglogp(action)], {X: obs, **feeder.feeds(tf)})

    obs, rews = data(58, ("n", (8, 4)), ("n", (8,)))
    out = {"loss": [], "approxkl": [], "clipfrac": [], "kl": []}
    with tf.Session() as sess:
        sess.run(tf.global_variables_initializer())
        sess.run(assign_old_eq_new)
        actions, values, neglogps = step(obs)
        advs = rews - values
        feed = {X: obs, A: actions, ADV: (advs - advs.mean()) / (advs.std() + 1e-8), R: rews, OLDVPRED: values,
                OLDNEGLOGPAC: neglogps, LR: 0.01, CLIPRANGE: 0.2}
        for _ in range(3):
            lo, kl, cf, _, mk = tf.get_default_session().run([loss, approxkl, clipfrac, train_op, meankl], feed)
            out["loss"].append(lo)
            out["approxkl"].append(kl)
            out["clipfrac"].append(cf)
            out["kl"].append(mk)
        out["actions"], out["values"], out["grad_norm"] = actions, values, sess.run(grad_norm, feed)
        out["mode"] = sess.run(pd.mode(), feed)
        return _trained(tf, sess, {k: np.array(v) for k, v in out.items()},
                        names={v.op.name for v in tf.global_variables() if "Adam" not in v.op.name})


# ---- Recommenders: a factorization machine and neural collaborative filtering ----------------------------------

def factorization_machine(tf, feeder):
    """A factorization machine twice: on dense features (the well-known fm_tensorflow notebook) and on sparse
    feature ids with values (DeepFM-style, embedding_lookup_sparse with sum, mean and sqrtn)."""
    n, p, k = 6, 7, 3
    X = tf.placeholder(tf.float32, [None, p])
    y = tf.placeholder(tf.float32, [None, 1])
    w0 = tf.Variable(tf.zeros([1]))
    W = tf.Variable(tf.zeros([p]))
    V = tf.Variable(tf.random_normal([k, p], stddev=0.01))
    linear_terms = tf.add(w0, tf.reduce_sum(tf.multiply(W, X), 1, keep_dims=True))
    interactions = tf.multiply(0.5, tf.reduce_sum(
        tf.subtract(tf.pow(tf.matmul(X, tf.transpose(V)), 2), tf.matmul(tf.pow(X, 2), tf.transpose(tf.pow(V, 2)))),
        1, keep_dims=True))
    y_hat = tf.add(linear_terms, interactions)
    l2_norm = tf.reduce_sum(tf.add(tf.multiply(0.001, tf.pow(W, 2)), tf.multiply(0.001, tf.pow(V, 2))))
    error = tf.reduce_mean(tf.square(tf.subtract(y, y_hat)))
    loss = tf.add(error, l2_norm)

    sp_ids = tf.sparse_placeholder(tf.int64)
    sp_vals = tf.sparse_placeholder(tf.float32)
    emb = tf.Variable(tf.random_normal([p, k], stddev=0.1))
    bias = tf.Variable(tf.random_normal([p, 1], stddev=0.1))
    summed = tf.nn.embedding_lookup_sparse(emb, sp_ids, sp_vals, combiner="sum")
    squared = tf.nn.embedding_lookup_sparse(tf.square(emb), sp_ids,
                                            tf.SparseTensor(sp_vals.indices, tf.square(sp_vals.values),
                                                            sp_vals.dense_shape), combiner="sum")
    first = tf.nn.embedding_lookup_sparse(bias, sp_ids, sp_vals, combiner="sum")
    logit = tf.squeeze(first, 1) + 0.5 * tf.reduce_sum(tf.square(summed) - squared, 1)
    sp_loss = tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.squeeze(y, 1), logits=logit))
    mean = tf.nn.embedding_lookup_sparse(emb, sp_ids, sp_vals, combiner="mean")
    sqrtn = tf.nn.embedding_lookup_sparse(emb, sp_ids, None, combiner="sqrtn")
    train_op = tf.train.AdagradOptimizer(0.1).minimize(loss + sp_loss)
    xs, ys = data(59, ("f", (n, p)), ("i", (n, 1), 2))
    xs[xs < 0.5] = 0.0
    ids = tf.SparseTensorValue(np.argwhere(xs != 0), np.nonzero(xs)[1].astype(np.int64), [n, p])
    vals = tf.SparseTensorValue(np.argwhere(xs != 0), xs[xs != 0], [n, p])
    feed = {X: xs, y: ys.astype(np.float32), sp_ids: ids, sp_vals: vals}
    sess = _session_run(tf, feeder)
    return _train(tf, sess, train_op, loss + sp_loss, feed, extra={"mean": mean, "sqrtn": sqrtn, "y_hat": y_hat})


def ncf(tf, feeder):
    """Neural collaborative filtering (NeuMF): user and item embeddings looked up twice, GMF's product beside an
    MLP tower, a sigmoid loss; item embeddings split in two partitions looked up with partition_strategy='div'."""
    users, items, factors = 5, 7, 4
    user = tf.placeholder(tf.int32, [None])
    item = tf.placeholder(tf.int32, [None])
    label = tf.placeholder(tf.float32, [None])
    init = tf.random_normal_initializer(stddev=0.01)
    mf_user = tf.get_variable("mf_user", [users, factors], initializer=init)
    mf_item = [tf.get_variable("mf_item_%d" % i, [4 - i, factors], initializer=init) for i in range(2)]
    mlp_user = tf.get_variable("mlp_user", [users, factors], initializer=init)
    mlp_item = tf.get_variable("mlp_item", [items, factors], initializer=init)
    gmf = tf.multiply(tf.nn.embedding_lookup(mf_user, user),
                      tf.nn.embedding_lookup(mf_item, item, partition_strategy="div"))
    h = tf.concat([tf.nn.embedding_lookup(mlp_user, user), tf.nn.embedding_lookup(mlp_item, item)], axis=-1)
    for units in (8, 4):
        h = tf.layers.dense(h, units, activation=tf.nn.relu)
    logits = tf.squeeze(tf.layers.dense(tf.concat([gmf, h], -1), 1), -1)
    loss = tf.losses.sigmoid_cross_entropy(label, logits)
    train_op = tf.train.AdamOptimizer(0.01).minimize(loss)
    _, top_items = tf.nn.top_k(tf.sigmoid(logits), k=3)
    us, its, ls = data(60, ("i", (8,), users), ("i", (8,), items), ("i", (8,), 2))
    sess = _session_run(tf, feeder)
    return _train(tf, sess, train_op, loss, {user: us, item: its, label: ls.astype(np.float32)},
                  extra={"top_items": top_items})


# ---- Detection and segmentation bits ---------------------------------------------------------------------------

def detection(tf, feeder):
    """A detector's pieces: ROI pooling by crop_and_resize and max pooling (tf-faster-rcnn's _crop_pool_layer),
    non-max suppression (plain, with a score threshold, padded), resizing with and without align_corners, and a
    GIoU box loss; trained end to end through crop_and_resize."""
    feature_stride = 4.0
    image = tf.placeholder(tf.float32, [1, 16, 16, 3])
    rois = tf.placeholder(tf.float32, [None, 5])
    gt = tf.placeholder(tf.float32, [None, 4])
    net = tf.nn.relu(tf.nn.conv2d(image, tf.Variable(tf.truncated_normal([3, 3, 3, 4], stddev=0.3)),
                                  [1, 4, 4, 1], "SAME"))
    batch_ids = tf.squeeze(tf.slice(rois, [0, 0], [-1, 1], name="batch_id"), [1])
    bottom_shape = tf.shape(net)
    height = (tf.to_float(bottom_shape[1]) - 1.) * np.float32(feature_stride)
    width = (tf.to_float(bottom_shape[2]) - 1.) * np.float32(feature_stride)
    x1 = tf.slice(rois, [0, 1], [-1, 1], name="x1") / width
    y1 = tf.slice(rois, [0, 2], [-1, 1], name="y1") / height
    x2 = tf.slice(rois, [0, 3], [-1, 1], name="x2") / width
    y2 = tf.slice(rois, [0, 4], [-1, 1], name="y2") / height
    bboxes = tf.stop_gradient(tf.concat([y1, x1, y2, x2], axis=1))
    crops = tf.image.crop_and_resize(net, bboxes, tf.to_int32(batch_ids), [4, 4], name="crops")
    pooled = tf.nn.max_pool(crops, [1, 2, 2, 1], [1, 2, 2, 1], padding="SAME")
    fc = tf.layers.dense(tf.layers.flatten(pooled), 5)
    scores = tf.nn.sigmoid(fc[:, 0])
    deltas = fc[:, 1:]
    pred = tf.concat([bboxes[:, :2] + 0.1 * deltas[:, :2], bboxes[:, 2:] + 0.1 * deltas[:, 2:]], 1)

    def giou_loss(b1, b2):
        area1 = (b1[:, 2] - b1[:, 0]) * (b1[:, 3] - b1[:, 1])
        area2 = (b2[:, 2] - b2[:, 0]) * (b2[:, 3] - b2[:, 1])
        lt = tf.maximum(b1[:, :2], b2[:, :2])
        rb = tf.minimum(b1[:, 2:], b2[:, 2:])
        wh = tf.maximum(rb - lt, 0.0)
        inter = wh[:, 0] * wh[:, 1]
        union = area1 + area2 - inter
        iou = inter / union
        enclose = tf.maximum(b1[:, 2:], b2[:, 2:]) - tf.minimum(b1[:, :2], b2[:, :2])
        enclose_area = enclose[:, 0] * enclose[:, 1]
        return tf.reduce_mean(1.0 - (iou - (enclose_area - union) / enclose_area)), iou

    loss, iou = giou_loss(pred, gt)
    loss += tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(labels=tf.to_float(iou > 0.3), logits=fc[:, 0]))
    train_op = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    keep = tf.image.non_max_suppression(pred, scores, 3, iou_threshold=0.5)
    keep_thresh = tf.image.non_max_suppression(pred, scores, 3, iou_threshold=0.3, score_threshold=0.4)
    keep_padded, valid = tf.image.non_max_suppression_padded(pred, scores, 4, iou_threshold=0.5,
                                                             pad_to_max_output_size=True)
    detections = tf.gather(pred, keep)
    resized = {"bilinear_ac": tf.image.resize_bilinear(net, [7, 7], align_corners=True),
               "bilinear_hp": tf.image.resize_bilinear(net, [6, 6], half_pixel_centers=True),
               "nearest_ac": tf.image.resize_nearest_neighbor(net, [7, 7], align_corners=True),
               "resize_images": tf.image.resize_images(net, [9, 9], align_corners=True),
               "resize_v1": tf.image.resize(net, [5, 5], method=tf.image.ResizeMethod.NEAREST_NEIGHBOR),
               "crop_nearest": tf.image.crop_and_resize(net, bboxes, tf.to_int32(batch_ids), [3, 2],
                                                        method="nearest", extrapolation_value=-1.0)}
    img = data(61, ("f", (1, 16, 16, 3)))[0]
    roi_v = np.array([[0, 0, 0, 8, 8], [0, 1, 1, 9, 9], [0, 4, 2, 12, 11], [0, 6, 6, 13, 14], [0, -2, 3, 5, 16]],
                     np.float32)
    gt_v = np.array([[0.0, 0.0, 0.6, 0.6], [0.1, 0.1, 0.7, 0.7], [0.2, 0.3, 0.9, 0.9], [0.5, 0.5, 1.0, 1.0],
                     [0.2, 0.0, 1.0, 0.5]], np.float32)
    feed = {image: img, rois: roi_v, gt: gt_v}
    sess = _session_run(tf, feeder)
    extra = {"keep": keep, "keep_thresh": keep_thresh, "keep_padded": keep_padded, "valid": valid,
             "detections": detections, "crops": crops, **resized}
    return _train(tf, sess, train_op, loss, feed, extra=extra)


def fcn_segmentation(tf, feeder):
    """FCN / DeepLab-style segmentation: atrous convolutions three ways (tf.nn.atrous_conv2d, tf.nn.convolution's
    dilation_rate, tf.layers.conv2d's dilation_rate), a conv2d_transpose upsampling with a bilinear kernel,
    depth_to_space, a per-pixel sparse softmax that ignores the void label 255, and tf.metrics.mean_iou."""
    classes = 3
    x = tf.placeholder(tf.float32, [2, 8, 8, 3])
    labels = tf.placeholder(tf.int32, [2, 8, 8])
    h = tf.nn.relu(tf.nn.conv2d(x, _w(tf, [3, 3, 3, 4]), [1, 2, 2, 1], "SAME"))                      # 4x4
    a1 = tf.nn.atrous_conv2d(h, _w(tf, [3, 3, 4, 4]), rate=2, padding="SAME")
    a2 = tf.nn.convolution(h, _w(tf, [3, 3, 4, 4]), "SAME", dilation_rate=[2, 2])
    a3 = tf.layers.conv2d(h, 4, 3, padding="same", dilation_rate=2, name="aspp")
    h = tf.nn.relu(tf.concat([a1, a2, a3], -1))
    score = tf.nn.conv2d(h, _w(tf, [1, 1, 12, classes]), [1, 1, 1, 1], "VALID")
    f = np.array([0.25, 0.75, 0.75, 0.25], np.float32)                    # a bilinear kernel for stride 2, size 4
    bilinear = np.zeros((4, 4, classes, classes), np.float32)
    for c in range(classes):
        bilinear[:, :, c, c] = np.outer(f, f)
    up_w = tf.Variable(bilinear, name="upscore")
    up = tf.nn.conv2d_transpose(score, up_w, [2, 8, 8, classes], [1, 2, 2, 1], "SAME")
    sub = tf.depth_to_space(tf.nn.conv2d(h, _w(tf, [1, 1, 12, 4 * classes]), [1, 1, 1, 1], "SAME"), 2)
    logits = up + sub
    flat_logits = tf.reshape(logits, [-1, classes])
    flat_labels = tf.reshape(labels, [-1])
    valid = tf.not_equal(flat_labels, 255)
    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=tf.boolean_mask(flat_labels, valid),
                                                          logits=tf.boolean_mask(flat_logits, valid))
    loss = tf.reduce_mean(xent)
    train_op = tf.train.MomentumOptimizer(0.05, 0.9).minimize(loss)
    pred = tf.argmax(logits, axis=-1, output_type=tf.int32)
    miou, miou_update = tf.metrics.mean_iou(tf.where(tf.equal(labels, 255), tf.zeros_like(labels), labels), pred,
                                            classes, weights=tf.to_float(tf.not_equal(labels, 255)))
    xs, ys = data(62, ("f", (2, 8, 8, 3)), ("i", (2, 8, 8), classes))
    ys[0, :2] = 255
    feed = {x: xs, labels: ys}
    sess = _session_run(tf, feeder)
    sess.run(tf.local_variables_initializer())
    sess.run(miou_update, feed)
    return _train(tf, sess, train_op, loss, feed, extra={"pred": pred, "miou": miou})


def _w(tf, shape):
    return tf.Variable(tf.truncated_normal(shape, stddev=0.3))


SCRIPTS = {f.__name__: f for f in (bert, gpt2, gcn, pinn_float32, pinn_float64, maml, speech_features, speech_ctc,
                                   mdn_bayes, ppo,
                                   factorization_machine, ncf, detection, fcn_segmentation)}


def run_script(tf, name: str, feeder: Feeder) -> dict:
    """Runs script `name` in a fresh default graph of `tf`."""
    tf.reset_default_graph()
    with tf.Graph().as_default():
        return SCRIPTS[name](tf, feeder)
