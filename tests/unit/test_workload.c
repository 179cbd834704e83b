/* test_workload.c — the workload loader: published parameter counts of the shipped models,
 * hand-computed FLOPs and activation sizes, and one-line errors for broken files. */
#include <cjson/cJSON.h>
#include <glib/gstdio.h>
#include <math.h>
#include <string.h>

#include "cli/cmds.h"
#include "cu_main.h"
#include "core/dl_common.h"
#include "model/workload.h"

static wl_model *load_ok(const char *name) {
  GError *err = NULL;
  wl_model *m = wl_load(name, &err);
  if (!m) fprintf(stderr, "\n%s\n", err->message);
  CU_ASSERT_PTR_NOT_NULL_FATAL(m);
  return m;
}

static const wl_layer *layer(const wl_model *m, const char *name) {
  int i = wl_find_layer(m, name);
  CU_ASSERT_FATAL(i >= 0);
  return &m->layers[i];
}

/* ---- published parameter counts ---------------------------------------------------------- */

static void test_resnet50_params(void) {
  wl_model *m = load_ok("resnet50-imagenet");
  CU_ASSERT_EQUAL(m->params, 25557032); /* torchvision resnet50 */
  CU_ASSERT_EQUAL(m->dataset_samples, 1281167);
  CU_ASSERT_EQUAL(m->default_batch, 256);
  /* v1.5: the stride is in the 3x3 conv of the first bottleneck of layer2 */
  CU_ASSERT_EQUAL(layer(m, "layer2.0.conv1")->out.h, 56);
  CU_ASSERT_EQUAL(layer(m, "layer2.0.conv2")->out.h, 28);
  CU_ASSERT_EQUAL(layer(m, "layer1.0.conv3")->out_elems, 256 * 56 * 56);
  CU_ASSERT_EQUAL(layer(m, "fc")->in.c, 2048);
  wl_free(m);
}

static void test_vgg16_params(void) {
  wl_model *m = load_ok("vgg16-imagenet");
  CU_ASSERT_EQUAL(m->params, 138357544); /* torchvision vgg16 */
  /* conv1_1: 2·3·3·3·64·224·224 + bias 64·224·224; its input is the image: no dX */
  const wl_layer *c = layer(m, "conv1_1");
  CU_ASSERT_DOUBLE_EQUAL(c->fwd_flops, 173408256.0 + 3211264.0, 0.5);
  CU_ASSERT_DOUBLE_EQUAL(c->bwd_flops, 173408256.0 + 3211264.0, 0.5);
  CU_ASSERT_EQUAL(layer(m, "fc6")->in.c, 25088);
  wl_free(m);
}

static void test_alexnet(void) {
  wl_model *m = load_ok("alexnet-imagenet");
  CU_ASSERT_EQUAL(m->params, 60965224); /* Caffe bvlc_alexnet */
  /* conv1: 227 -> (227-11)/4+1 = 55; 2·3·11·11·96·55·55 = 210,830,400 + bias 290,400 */
  const wl_layer *c1 = layer(m, "conv1");
  CU_ASSERT_EQUAL(c1->out.c, 96);
  CU_ASSERT_EQUAL(c1->out.h, 55);
  CU_ASSERT_EQUAL(c1->out.w, 55);
  CU_ASSERT_EQUAL(c1->out_elems, 290400);
  CU_ASSERT_EQUAL(c1->params, 96 * 3 * 11 * 11 + 96);
  CU_ASSERT_DOUBLE_EQUAL(c1->fwd_flops, 211120800.0, 0.5);
  CU_ASSERT_DOUBLE_EQUAL(c1->bwd_flops, 211120800.0, 0.5); /* dW + bias only */
  CU_ASSERT_EQUAL(c1->saved_elems, 3 * 227 * 227);
  /* conv2, two groups: 2·(96/2)·5·5·256·27·27 = 447,897,600 (+ bias 186,624);
   * backward dX + dW = 2 × 447,897,600 + bias 186,624 */
  const wl_layer *c2 = layer(m, "conv2");
  CU_ASSERT_EQUAL(c2->groups, 2);
  CU_ASSERT_EQUAL(c2->params, 256 * 48 * 25 + 256);
  CU_ASSERT_DOUBLE_EQUAL(c2->fwd_flops, 448084224.0, 0.5);
  CU_ASSERT_DOUBLE_EQUAL(c2->bwd_flops, 895981824.0, 0.5);
  CU_ASSERT_EQUAL(layer(m, "pool5")->out_elems, 256 * 6 * 6);
  CU_ASSERT_EQUAL(layer(m, "fc6")->params, 9216 * 4096 + 4096);
  wl_free(m);
}

/* ResNet-18, CIFAR form, by hand (convs without bias; BN 2 per channel):
 *   stem   conv 3·64·9 = 1,728 + bn 128                                        =      1,856
 *   layer1 2 × (2 × 64·64·9 = 73,728 + 2 bn 256)                              =    147,968
 *   layer2 b0: 64·128·9 73,728 + 128·128·9 147,456 + ds 64·128 8,192 + 3 bn 768 =    230,144
 *          b1: 2 × 147,456 + 2 bn 512                                          =    295,424
 *   layer3 b0: 128·256·9 294,912 + 589,824 + ds 32,768 + 3 bn 1,536            =    919,040
 *          b1: 2 × 589,824 + 1,024                                             =  1,180,672
 *   layer4 b0: 256·512·9 1,179,648 + 2,359,296 + ds 131,072 + 3 bn 3,072       =  3,673,088
 *          b1: 2 × 2,359,296 + 2,048                                           =  4,720,640
 *   fc     512·100 + 100                                                       =     51,300
 *   total                                                                      = 11,220,132 */
static void test_resnet18_cifar(void) {
  wl_model *m = load_ok("resnet18-cifar100");
  CU_ASSERT_EQUAL(m->params, 11220132);
  CU_ASSERT_EQUAL(m->dataset_samples, 50000);
  CU_ASSERT_EQUAL(m->default_batch, 128);
  CU_ASSERT_EQUAL(m->optimizer, WL_OPT_SGD);
  CU_ASSERT_EQUAL(layer(m, "layer4.1.relu")->out_elems, 512 * 4 * 4);
  /* global average pool over 4×4: 16 adds per output */
  CU_ASSERT_EQUAL(layer(m, "avgpool")->out_elems, 512);
  CU_ASSERT_DOUBLE_EQUAL(layer(m, "avgpool")->fwd_flops, 512.0 * 16, 0.5);
  /* residual blocks: 8 BasicBlocks, each contiguous; stem and head outside any block */
  CU_ASSERT_EQUAL(m->n_blocks, 8);
  CU_ASSERT_EQUAL(layer(m, "conv1")->block, -1);
  const wl_layer *a = layer(m, "layer2.0.add");
  CU_ASSERT_STRING_EQUAL(m->block_names[a->block], "layer2.0");
  CU_ASSERT_EQUAL(a->n_inputs, 2);
  CU_ASSERT_STRING_EQUAL(m->layers[a->inputs[1]].name, "layer2.0.downsample_bn");
  wl_free(m);
}

/* Megatron-LM (Narayanan et al. 2021, §5.1): P = 12·l·h²·(1 + 13/(12h) + (V+s)/(12·l·h)),
 * i.e. 12lh² + 13lh + (V+s)h: per layer two LayerNorms (4h), QKV 3h²+3h, projection h²+h,
 * fc1 4h²+4h, fc2 4h²+h, plus token and position embeddings. The formula leaves out the final
 * LayerNorm's γ and β, so the model holds exactly 2h more. */
static void check_gpt(const char *name, int64_t h, int64_t l, int heads, int64_t batch) {
  const int64_t V = 51200, s = 2048;
  wl_model *m = load_ok(name);
  const double formula = 12.0 * l * h * h * (1 + 13.0 / (12.0 * h) + (double)(V + s) / (12.0 * l * h));
  const int64_t exact = 12 * l * h * h + 13 * l * h + (V + s) * h;
  CU_ASSERT_DOUBLE_EQUAL(formula, (double)exact, 1.0);
  CU_ASSERT_EQUAL(m->params, exact + 2 * h);
  CU_ASSERT_EQUAL(m->seq_len, s);
  CU_ASSERT_EQUAL(m->vocab, V);
  CU_ASSERT_EQUAL(m->default_batch, batch);
  CU_ASSERT_EQUAL(m->optimizer, WL_OPT_ADAM);
  CU_ASSERT_EQUAL(m->n_blocks, l + 1); /* embeddings + l transformer layers */
  const wl_layer *head = layer(m, "lm_head");
  CU_ASSERT_EQUAL(head->params, 0);
  CU_ASSERT_STRING_EQUAL(m->layers[head->tied_to].name, "tok_embed");
  CU_ASSERT_EQUAL(head->out.c, V);
  CU_ASSERT_EQUAL(layer(m, "h0.qkv")->tp_role, WL_TP_COLUMN);
  CU_ASSERT_EQUAL(layer(m, "h0.proj")->tp_role, WL_TP_ROW);
  const wl_layer *at = layer(m, "h0.attn");
  CU_ASSERT_EQUAL(at->heads, heads);
  CU_ASSERT_EQUAL(at->params, 0);
  /* QKᵀ 2·s²·h + softmax 5·heads·s² + AV 2·s²·h */
  CU_ASSERT_DOUBLE_EQUAL(at->fwd_flops, 4.0 * s * s * h + 5.0 * heads * s * s, 1.0);
  wl_free(m);
}

/* Llama 3 ("The Llama 3 Herd of Models", Meta 2024, Table 3; vocabulary 128,256): per layer
 * QKV h·(H + 2·KV)·h/H, output projection h², SwiGLU 3·h·ffn, two RMSNorms 2h; the token
 * embedding and the untied output layer V·h each, and the final RMSNorm h. The published counts
 * (Meta's model cards: 8.03B, 70.6B, 405.9B) hold within 0.1 %. */
static void check_llama(const char *name, int64_t l, int64_t h, int64_t ffn, int H, int KV,
                        double published) {
  const int64_t V = 128256, s = 8192, hs = h / H;
  wl_model *m = load_ok(name);
  const int64_t exact = l * (h * (H + 2 * KV) * hs + h * h + 3 * h * ffn + 2 * h) + 2 * V * h + h;
  CU_ASSERT_EQUAL(m->params, exact);
  CU_ASSERT(fabs((double)m->params / published - 1) < 1e-3);
  CU_ASSERT_EQUAL(m->seq_len, s);
  CU_ASSERT_EQUAL(m->n_blocks, l + 1);
  const wl_layer *at = layer(m, "h0.attn"), *rope = layer(m, "h0.rope"),
                 *sw = layer(m, "h0.swiglu"), *rms = layer(m, "h0.norm1");
  CU_ASSERT_EQUAL(at->kv_heads, KV);
  CU_ASSERT(at->flash);
  CU_ASSERT_EQUAL(at->in.c, (H + 2 * KV) * hs);
  CU_ASSERT_EQUAL(at->out.c, h);
  /* flash-style: forward QKᵀ + softmax + AV, backward recomputes QKᵀ (10·s²·h); it keeps the
   * QKV input, its output and a log-sum-exp per head and query, never the s×s probabilities */
  CU_ASSERT_DOUBLE_EQUAL(at->fwd_flops, 4.0 * s * s * h + 5.0 * H * s * s, 1.0);
  CU_ASSERT_DOUBLE_EQUAL(at->bwd_flops, 10.0 * s * s * h + 5.0 * H * s * s, 1.0);
  CU_ASSERT_EQUAL(at->saved_elems, (H + 2 * KV) * hs * s + h * s + H * s);
  /* rope turns the Q and K heads, 3 FLOP per element each way, and keeps nothing */
  CU_ASSERT_EQUAL(rope->out.c, rope->in.c);
  CU_ASSERT_DOUBLE_EQUAL(rope->fwd_flops, 3.0 * (H + KV) * hs * s, 0.5);
  CU_ASSERT_DOUBLE_EQUAL(rope->bwd_flops, rope->fwd_flops, 0.5);
  CU_ASSERT_EQUAL(rope->saved_elems, 0);
  CU_ASSERT_EQUAL(rope->rope_theta, 500000.0);
  /* SwiGLU halves the channels: 5 FLOP forward and 11 backward per output, keeps its input */
  CU_ASSERT_EQUAL(sw->in.c, 2 * ffn);
  CU_ASSERT_EQUAL(sw->out.c, ffn);
  CU_ASSERT_DOUBLE_EQUAL(sw->fwd_flops, 5.0 * ffn * s, 0.5);
  CU_ASSERT_DOUBLE_EQUAL(sw->bwd_flops, 11.0 * ffn * s, 0.5);
  CU_ASSERT_EQUAL(sw->saved_elems, 2 * ffn * s);
  /* RMSNorm: γ only, 4 and 7 FLOP per element */
  CU_ASSERT_EQUAL(rms->params, h);
  CU_ASSERT_DOUBLE_EQUAL(rms->fwd_flops, 4.0 * h * s, 0.5);
  CU_ASSERT_DOUBLE_EQUAL(rms->bwd_flops, 7.0 * h * s, 0.5);
  CU_ASSERT_EQUAL(layer(m, "lm_head")->params, V * h); /* untied */
  wl_free(m);
}

static void test_llama3(void) {
  check_llama("llama3-8b", 32, 4096, 14336, 32, 8, 8.03e9);
  check_llama("llama3-70b", 80, 8192, 28672, 64, 8, 70.6e9);
  check_llama("llama3-405b", 126, 16384, 53248, 128, 8, 405.9e9);
}

/* Mixtral 8x7B (Jiang et al. 2024: 46.7B parameters, 12.9B active) and DeepSeekMoE 16B (Dai et
 * al. 2024: 16.4B, 2.8B active): SwiGLU experts of 3·h·ffn, a router h·E, shared experts beside
 * the routed ones; attention and norms as Llama's; untied output layer. Active parameters: the
 * dense parts, top_k + shared experts per MoE layer (the router counted). Both published figures
 * are rounded to 0.1 B, so the counts hold them within 0.05 B (DeepSeekMoE's exact count is
 * 16,375,728,128: 0.15 % below its "16.4B"). */
static void check_moe_decoder(const char *name, int64_t l, int64_t h, int H, int KV, int64_t V,
                              int E, int k, int64_t f, int shared, int dense, int64_t dense_ffn,
                              double total, double active) {
  wl_model *m = load_ok(name);
  const int64_t hs = h / H, attn = h * (H + 2 * KV) * hs + h * h, expert = 3 * h * f;
  const int64_t moe_layer = attn + 2 * h + h * E + (E + shared) * expert;
  const int64_t dense_layer = attn + 2 * h + 3 * h * dense_ffn;
  const int64_t exact = (l - dense) * moe_layer + dense * dense_layer + 2 * V * h + h;
  CU_ASSERT_EQUAL(m->params, exact);
  /* the published figures are rounded to 0.1 B: within half of that */
  CU_ASSERT(fabs((double)m->params - total) <= 0.05e9);
  const int64_t act = exact - (l - dense) * (E - k) * expert;
  CU_ASSERT(fabs((double)act - active) <= 0.05e9);
  const wl_layer *moe = layer(m, "h1.moe");
  CU_ASSERT(moe->gated);
  CU_ASSERT_EQUAL(moe->shared, shared);
  /* per token: the router, then top_k + shared SwiGLU experts (6·h·f + 5·f each) */
  CU_ASSERT_DOUBLE_EQUAL(moe->fwd_flops, (double)m->seq_len * (2.0 * h * E + (k + shared) *
                                                                (6.0 * h * f + 5.0 * f)), 1.0);
  wl_free(m);
}

static void test_moe_decoders(void) {
  check_moe_decoder("mixtral-8x7b", 32, 4096, 32, 8, 32000, 8, 2, 14336, 0, 0, 0, 46.7e9, 12.9e9);
  check_moe_decoder("deepseekmoe-16b", 28, 2048, 16, 16, 102400, 64, 6, 1408, 2, 1, 10944, 16.4e9,
                    2.8e9);
}

static void test_gpt_1_7b(void) { check_gpt("gpt-1.7b", 2304, 24, 24, 512); }
static void test_gpt_18b(void) { check_gpt("gpt-18b", 6144, 40, 48, 1024); }

static void test_moe(void) {
  wl_model *m = load_ok("moe-gpt-8x");
  const wl_layer *e = layer(m, "h1.moe");
  /* h=1024, E=8, ffn=4096: 8·(2·1024·4096 + 4096 + 1024) + 1024·8 */
  CU_ASSERT_EQUAL(e->params, 67158016);
  /* per token: router 2·1024·8 + top_k 2 × 4·1024·4096; 1024 tokens per sample */
  CU_ASSERT_DOUBLE_EQUAL(e->fwd_flops, 1024.0 * (16384.0 + 33554432.0), 1.0);
  CU_ASSERT_DOUBLE_EQUAL(e->bwd_flops, 2 * e->fwd_flops, 1.0);
  CU_ASSERT_EQUAL(e->experts, 8);
  CU_ASSERT_EQUAL(e->top_k, 2);
  CU_ASSERT_DOUBLE_EQUAL(e->capacity_factor, 1.25, 1e-12);
  CU_ASSERT(e->weighted);
  CU_ASSERT_EQUAL(wl_find_layer(m, "h0.moe"), -1); /* every other layer */
  CU_ASSERT(wl_find_layer(m, "h0.fc1") >= 0);
  wl_free(m);
}

/* mlp-small 784→512→512→10 by hand:
 *   params fc1 784·512+512 = 401,920; fc2 512·512+512 = 262,656; fc3 512·10+10 = 5,130
 *   fwd    fc1 2·784·512+512 = 803,328; relu 512; fc2 2·512·512+512 = 524,800; relu 512;
 *          fc3 2·512·10+10 = 10,250; softmax_ce 5·10 = 50                 → 1,339,452
 *   bwd    fc1 (no dX) 803,328; relu 512; fc2 2·524,288+512 = 1,049,088; relu 512;
 *          fc3 2·10,240+10 = 20,490; softmax_ce 2·10 = 20                  → 1,873,950 */
static void test_mlp_small(void) {
  wl_model *m = load_ok("mlp-small");
  CU_ASSERT_EQUAL(m->params, 669706);
  CU_ASSERT_DOUBLE_EQUAL(m->fwd_flops, 1339452.0, 0.5);
  CU_ASSERT_DOUBLE_EQUAL(m->bwd_flops, 1873950.0, 0.5);
  CU_ASSERT_EQUAL(m->act_elems, 512 + 512 + 512 + 512 + 10 + 10);
  CU_ASSERT_EQUAL(m->n_layers, 6);
  CU_ASSERT_EQUAL(m->layers[0].inputs[0], -1);
  CU_ASSERT_EQUAL(m->layers[1].inputs[0], 0);
  wl_free(m);
}

static void test_small_models(void) {
  wl_model *m = load_ok("mlp-deep");
  CU_ASSERT_EQUAL(m->params, 1024 * 1024 * 8 + 1024 * 8 + 1024 * 10 + 10);
  wl_free(m);
  m = load_ok("cnn-small");
  /* conv1 3·16·9 432 + bn 32 + conv2 16·32·9 4,608 + bn 64 + fc 2048·10+10 20,490 */
  CU_ASSERT_EQUAL(m->params, 432 + 32 + 4608 + 64 + 20490);
  CU_ASSERT_EQUAL(layer(m, "flatten")->out.c, 32 * 8 * 8);
  wl_free(m);
  m = load_ok("gpt-tiny");
  CU_ASSERT_EQUAL(m->params, 12 * 2 * 64 * 64 + 13 * 2 * 64 + (256 + 32) * 64 + 2 * 64);
  wl_free(m);
}

static void test_json_and_names(void) {
  for (int k = 0; k < WL_N_LAYER_KINDS; k++) {
    wl_layer_kind back;
    CU_ASSERT(wl_layer_kind_from_name(wl_layer_kind_name((wl_layer_kind)k), &back));
    CU_ASSERT_EQUAL((int)back, k);
  }
  CU_ASSERT_STRING_EQUAL(wl_layer_kind_name(WL_SOFTMAX_CE), "softmax_ce");
  wl_model *m = load_ok("alexnet-imagenet");
  char *a = wl_to_json(m), *b = wl_to_json(m);
  CU_ASSERT_STRING_EQUAL(a, b);
  cJSON *j = cJSON_Parse(a);
  CU_ASSERT_PTR_NOT_NULL_FATAL(j);
  CU_ASSERT_DOUBLE_EQUAL(cJSON_GetObjectItem(j, "params")->valuedouble, 60965224.0, 0.5);
  const cJSON *layers = cJSON_GetObjectItem(j, "layers");
  CU_ASSERT_EQUAL(cJSON_GetArraySize(layers), m->n_layers);
  const cJSON *c2 = cJSON_GetArrayItem(layers, 4);
  CU_ASSERT_STRING_EQUAL(cJSON_GetObjectItem(c2, "name")->valuestring, "conv2");
  CU_ASSERT_EQUAL(cJSON_GetObjectItem(c2, "groups")->valueint, 2);
  CU_ASSERT_DOUBLE_EQUAL(cJSON_GetObjectItem(c2, "fwd_flops")->valuedouble, 448084224.0, 0.5);
  cJSON_Delete(j);
  g_free(a);
  g_free(b);
  wl_free(m);
}

/* ---- broken files ------------------------------------------------------------------------ */

static char *tmpdir;

/* Writes `text` to a file in a temporary directory, loads it, and checks the load fails with
 * DL_ERR_INPUT on one line holding the path and each of the needles. */
static void expect_fail(const char *text, const char *needle1, const char *needle2) {
  if (!tmpdir) tmpdir = g_dir_make_tmp("dlsim-wl-XXXXXX", NULL);
  CU_ASSERT_PTR_NOT_NULL_FATAL(tmpdir);
  char *path = g_build_filename(tmpdir, "x.json", NULL);
  CU_ASSERT_FATAL(g_file_set_contents(path, text, -1, NULL));
  GError *err = NULL;
  wl_model *m = wl_load(path, &err);
  CU_ASSERT_PTR_NULL(m);
  wl_free(m);
  CU_ASSERT_PTR_NOT_NULL_FATAL(err);
  CU_ASSERT(g_error_matches(err, DL_ERROR, DL_ERR_INPUT));
  CU_ASSERT(strstr(err->message, path) == err->message);
  CU_ASSERT(strchr(err->message, '\n') == NULL);
  if (needle1 && !strstr(err->message, needle1))
    CU_FAIL_FATAL("message lacks the first needle");
  if (needle2 && !strstr(err->message, needle2))
    CU_FAIL_FATAL("message lacks the second needle");
  g_error_free(err);
  g_unlink(path);
  g_free(path);
}

/* A valid header around the given layers. */
static char *model_with(const char *layers) {
  return g_strdup_printf(
      "{\"name\": \"x\", \"description\": \"d\", \"dataset\": {\"name\": \"s\", \"samples\": 10},\n"
      " \"input\": {\"c\": 3, \"h\": 8, \"w\": 8}, \"default_batch\": 4, \"optimizer\": \"sgd\",\n"
      " \"layers\": [%s]}\n",
      layers);
}

static void expect_layers_fail(const char *layers, const char *n1, const char *n2) {
  char *t = model_with(layers);
  expect_fail(t, n1, n2);
  g_free(t);
}

static void test_bad_layers(void) {
  /* the valid base loads */
  char *ok = model_with("{\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 4, \"kernel\": 3}");
  char *path = g_build_filename(g_get_tmp_dir(), "dlsim-wl-ok.json", NULL);
  CU_ASSERT_FATAL(g_file_set_contents(path, ok, -1, NULL));
  GError *err = NULL;
  wl_model *m = wl_load(path, &err);
  CU_ASSERT_PTR_NOT_NULL(m);
  if (m) CU_ASSERT_EQUAL(m->layers[0].out.h, 6);
  wl_free(m);
  g_unlink(path);
  g_free(path);
  g_free(ok);

  expect_layers_fail("{\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 4, \"kernel\": 3},"
                     "{\"name\": \"d\", \"type\": \"conv2d\", \"out_channels\": 4, \"kernel\": 0}",
                     "layers[1].kernel: expected 1..15, got 0", NULL);
  expect_layers_fail("{\"name\": \"c\", \"type\": \"conv3d\"}", "layers[0].type", "conv3d");
  expect_layers_fail("{\"name\": \"f\", \"type\": \"linear\"}", "layers[0].out_features", "missing");
  expect_layers_fail("{\"name\": \"f\", \"type\": \"linear\", \"out_features\": 2.5}",
                     "layers[0].out_features", "2.5");
  expect_layers_fail("{\"name\": \"f\", \"type\": \"linear\", \"out_features\": \"8\"}",
                     "layers[0].out_features", "integer");
  expect_layers_fail("{\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 4, \"kernal\": 3}",
                     "layers[0]", "\"kernal\"");
  expect_layers_fail("{\"name\": \"r\", \"type\": \"relu\"}, {\"name\": \"r\", \"type\": \"relu\"}",
                     "layers[1].name", "duplicate");
  expect_layers_fail("{\"name\": \"r\", \"type\": \"relu\", \"input\": \"nowhere\"}",
                     "layers[0].input", "nowhere");
  expect_layers_fail("{\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 4, \"kernel\": 3, "
                     "\"groups\": 2}",
                     "layers[0].groups", NULL);
  expect_layers_fail("{\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 4, \"kernel\": 9}",
                     "layers[0].kernel", "does not fit");
  expect_layers_fail("{\"name\": \"c\", \"type\": \"conv2d\", \"out_channels\": 4, \"kernel\": 3, "
                     "\"stride\": 2},"
                     "{\"name\": \"s\", \"type\": \"add\", \"inputs\": [\"c\", \"input\"]}",
                     "layers[1].inputs", "4x3x3 vs 3x8x8");
  expect_layers_fail("{\"name\": \"s\", \"type\": \"add\", \"inputs\": [\"input\"]}",
                     "layers[0].inputs", NULL);
  /* grouped-query attention and rope on a 24-channel QKV (8x8 positions) */
  expect_layers_fail("{\"name\": \"f\", \"type\": \"linear\", \"out_features\": 24},"
                     "{\"name\": \"a\", \"type\": \"attention\", \"heads\": 4, \"kv_heads\": 3}",
                     "layers[1].kv_heads", "must divide the 4 query heads");
  expect_layers_fail("{\"name\": \"f\", \"type\": \"linear\", \"out_features\": 26},"
                     "{\"name\": \"a\", \"type\": \"attention\", \"heads\": 4, \"kv_heads\": 2}",
                     "layers[1].input", "(heads + 2·kv_heads)·head_dim");
  expect_layers_fail("{\"name\": \"f\", \"type\": \"linear\", \"out_features\": 24},"
                     "{\"name\": \"q\", \"type\": \"rope\", \"heads\": 4}",
                     "layers[1].kv_heads", "missing");
  expect_layers_fail("{\"name\": \"f\", \"type\": \"linear\", \"out_features\": 18},"
                     "{\"name\": \"q\", \"type\": \"rope\", \"heads\": 4, \"kv_heads\": 1}",
                     "layers[1].heads", "must be even");
  expect_layers_fail("{\"name\": \"f\", \"type\": \"linear\", \"out_features\": 24},"
                     "{\"name\": \"q\", \"type\": \"rope\", \"heads\": 4, \"kv_heads\": 2, "
                     "\"theta\": 0}",
                     "layers[1].theta", NULL);
  expect_layers_fail("{\"name\": \"f\", \"type\": \"linear\", \"out_features\": 5},"
                     "{\"name\": \"g\", \"type\": \"swiglu\"}",
                     "layers[1].input", "in pairs");
  expect_layers_fail("{\"name\": \"f\", \"type\": \"linear\", \"out_features\": 4, \"tp\": \"diag\"}",
                     "layers[0].tp", "diag");
  expect_layers_fail("{\"name\": \"a\", \"type\": \"relu\", \"block\": \"b1\"},"
                     "{\"name\": \"b\", \"type\": \"relu\", \"block\": \"b2\"},"
                     "{\"name\": \"c\", \"type\": \"relu\", \"block\": \"b1\"}",
                     "layers[2].block", "contiguous");
  expect_layers_fail("{\"name\": \"f\", \"type\": \"linear\", \"out_features\": 4},"
                     "{\"name\": \"g\", \"type\": \"linear\", \"out_features\": 5, \"tied_to\": \"f\"}",
                     "layers[1].tied_to", NULL);
  expect_layers_fail("{\"name\": \"e\", \"type\": \"embedding\", \"vocab\": 10, \"out_features\": 4}",
                     "layers[0].input", "token ids");
  expect_layers_fail("{\"name\": \"m\", \"type\": \"moe\", \"experts\": 4, \"top_k\": 5, \"ffn\": 8}",
                     "layers[0].top_k", "expected 1..4, got 5");
  expect_layers_fail("{\"name\": \"p\", \"type\": \"maxpool\", \"kernel\": 2, \"padding\": 2}",
                     "layers[0].padding", NULL);
  expect_layers_fail("", "layers", "non-empty");
}

static void test_bad_files(void) {
  /* malformed JSON: the comma missing after line 3 is noticed at the next key, on line 4 */
  expect_fail("{\n  \"name\": \"x\",\n  \"description\": \"d\"\n  \"dataset\": 1\n}\n", "x.json:4:",
              "malformed JSON");
  expect_fail("{\"name\": \"x\", \"description\": \"d\", \"dataset\": {\"name\": \"s\", \"samples\": 0},"
              " \"input\": {\"c\": 3, \"h\": 8, \"w\": 8}, \"default_batch\": 4, \"optimizer\": \"sgd\","
              " \"layers\": []}",
              "dataset.samples", "got 0");
  expect_fail("{\"name\": \"x\", \"description\": \"d\", \"dataset\": {\"name\": \"s\", \"samples\": 1},"
              " \"input\": {\"c\": 3, \"h\": 8, \"w\": 8}, \"default_batch\": 4, \"optimizer\": \"lamb\","
              " \"layers\": []}",
              "optimizer", "lamb");
  expect_fail("{\"name\": \"x\"}", "description", "missing");
  expect_fail("{\"name\": \"x\", \"epochs\": 3}", "epochs", NULL);
  expect_fail("[1, 2]", "top level", NULL);

  GError *err = NULL;
  CU_ASSERT_PTR_NULL(wl_load("no-such-model", &err));
  CU_ASSERT(g_error_matches(err, DL_ERROR, DL_ERR_INPUT));
  CU_ASSERT(err && strstr(err->message, "no-such-model") && strstr(err->message, "alexnet-imagenet"));
  g_clear_error(&err);
  CU_ASSERT_PTR_NULL(wl_load("/nonexistent/dir/x.json", &err));
  CU_ASSERT(g_error_matches(err, DL_ERROR, DL_ERR_INPUT));
  g_clear_error(&err);
  if (tmpdir) {
    g_rmdir(tmpdir);
    g_free(tmpdir);
    tmpdir = NULL;
  }
}

static void test_cmd(void) {
  char *ok[] = {"workload", "mlp-small", "--json", NULL};
  char *bad[] = {"workload", "no-such-model", NULL};
  char *none[] = {"workload", NULL};
  CU_ASSERT_EQUAL(cmd_workload(3, ok), 0);
  CU_ASSERT_EQUAL(cmd_workload(2, bad), 2);
  CU_ASSERT_EQUAL(cmd_workload(1, none), 2);
}

static const dl_cu_test counts[] = {
    DL_CU_TEST(test_resnet50_params), DL_CU_TEST(test_vgg16_params),
    DL_CU_TEST(test_alexnet),         DL_CU_TEST(test_resnet18_cifar),
    DL_CU_TEST(test_gpt_1_7b),        DL_CU_TEST(test_gpt_18b),         DL_CU_TEST(test_llama3),
    DL_CU_TEST(test_moe_decoders),
    DL_CU_TEST(test_moe),             DL_CU_TEST(test_mlp_small),
    DL_CU_TEST(test_small_models),    DL_CU_TEST(test_json_and_names),
    DL_CU_END,
};
static const dl_cu_test errors[] = {
    DL_CU_TEST(test_bad_layers),
    DL_CU_TEST(test_bad_files),
    DL_CU_TEST(test_cmd),
    DL_CU_END,
};
const dl_cu_suite dl_cu_suites[] = {
    {"workload_models", counts},
    {"workload_errors", errors},
    {NULL, NULL},
};
