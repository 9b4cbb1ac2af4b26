// Whisper's configuration and weights, read from a GGUF in dasllama.convert.whisper's layout
// (its module text lists the tensor names). In the float32 lane everything is float32 in
// memory: F32 matrices view the mapped file, F16 ones (and vectors, positions, convolutions)
// are widened at load; the int8 lane quantizes the matrices to int8 rows instead.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/matmul.h"
#include "nn/conv1d.h"
#include "nn/linear.h"
#include "nn/linear_s8.h"

namespace dasllama {
class GGUFFile;
}

namespace dasllama::whisper {

struct SpecialTokens {
    int32_t eot = 0, sot = 0, translate = 0, transcribe = 0, sot_lm = 0, sot_prev = 0;
    int32_t no_speech = 0, no_timestamps = 0, timestamp_begin = 0;
};

struct WhisperConfig {
    int64_t n_mels = 80, n_audio_ctx = 1500, n_audio_state = 0, n_audio_head = 0,
            n_audio_layer = 0;
    int64_t n_text_ctx = 448, n_text_state = 0, n_text_head = 0, n_text_layer = 0, n_vocab = 0;
    int64_t sample_rate = 16000, n_fft = 400, hop_length = 160, chunk_seconds = 30;
    SpecialTokens tok;
    std::vector<int32_t> suppress_ids, suppress_ids_begin, lang_ids, alignment_heads;

    int64_t n_frames() const { return 2 * n_audio_ctx; }   // mel frames of one window
    bool multilingual() const { return n_vocab >= 51865; }
};

struct Norm {
    std::vector<float> w, b;
};

struct EncoderLayer {
    Norm attn_ln, mlp_ln;
    nn::Linear qkv, out, fc1, fc2;
};

struct DecoderLayer {
    Norm attn_ln, cross_ln, mlp_ln;
    nn::Linear qkv, out, cross_q, cross_kv, cross_out, fc1, fc2;
};

// How the linear layers multiply. kF32: float32 weights and activations (an F16 file's
// encoder and cross K/V weights widened at load; the decoder's step weights and the tied
// output read as F16 and widened 16 rows at a time, the same products). kInt8: CTranslate2's
// int8 numerics (nn/linear_s8.h), so transcripts follow faster-whisper's compute_type="int8":
// every linear, the token embedding and the tied output quantized at load to int8 rows with
// one float32 scale each, activations to 8 bits per row, integer products dequantized per
// row and column; convolutions, attention, softmax and LayerNorm stay float32 as in kF32.
enum class ComputeType { kF32, kInt8 };

struct WhisperWeights {
    WhisperConfig cfg;
    ComputeType compute = ComputeType::kF32;
    cpu::Precision precision = cpu::Precision::kF32;   // what float linears pass to cpu::matmul
    std::shared_ptr<const GGUFFile> file;
    cpu::WeightMatrix mel_filters;          // [n_mels, n_fft / 2 + 1] F32
    nn::Conv1d conv1, conv2;
    std::vector<float> enc_pos;             // [n_audio_ctx, d]
    std::vector<EncoderLayer> enc;
    Norm ln_post;
    cpu::WeightMatrix tok_emb;              // [n_vocab, d]
    std::vector<float> dec_pos;             // [n_text_ctx, d]
    std::vector<DecoderLayer> dec;
    Norm dec_ln;
    cpu::WeightMatrix proj;                 // [n_vocab, d]: tok_emb unless the file has its own
    // kInt8: the embedding's int8 rows (the lookup) and the output's (proj_s8 is tok_emb_s8
    // unless the file has its own projection); null in kF32.
    std::shared_ptr<const nn::S8Matrix> tok_emb_s8, proj_s8;
};

// Opens and checks `path`. Throws GGUFError naming the file and key or tensor that is missing
// or wrong, ShapeError for a tensor of the wrong shape.
std::shared_ptr<WhisperWeights> load_whisper(const std::string& path,
                                             ComputeType compute = ComputeType::kF32);
// "f32" (also "float32") or "int8"; throws ShapeError naming the value otherwise.
ComputeType compute_type_from_string(const std::string& name);

}  // namespace dasllama::whisper
