// A voice prompt from audio (pocket_tts TTSModel.get_state_for_audio_prompt): the audio, ended
// on a pause, through the Mimi encoder, then the speaker projection into the backbone's rows.
//
//   end_on_pause: cut after the last 20 ms frame within 35 dB of the loudest, fade out over
//                 20 ms, append 80 ms of silence (pocket_tts data/audio_utils.py)
//   Mimi encoder: zero-pad to whole frames; SEANet encoder (conv K; per stage, ratios
//                 reversed: residual blocks, ELU, Conv1d (2q, stride q); ELU, conv Kl); the
//                 encoder transformer (windowed); downsample Conv1d (2u, stride u, replicate
//                 padding)                                   -> latents [T', Ci]
//   rows:         [bos_voice;] latents speaker_proj^T        -> [(1 +) T', D]
//
// The whole signal is encoded in one call (the convolutions are the streaming ones, fresh).
#pragma once

#include <cstdint>
#include <vector>

#include "tts/pocket/config.h"
#include "tts/pocket/weights.h"

namespace dasllama {
class ThreadPool;
}

namespace dasllama::pocket {

// Audio at the model's sample rate -> the same audio ended on a pause.
std::vector<float> end_on_pause(const float* audio, int64_t n, int64_t sample_rate);

// Audio (mono, the model's rate, already ended on a pause) -> Mimi latents [T', Ci].
std::vector<float> mimi_encode(const PocketConfig& c, const PocketWeights& w, const float* audio,
                               int64_t n, ThreadPool& pool);

// Audio (mono, the model's rate) -> the voice's prompt rows [n_rows, D]. Throws ShapeError
// when the model has no voice encoder or the audio is shorter than one frame.
std::vector<float> encode_voice(const PocketConfig& c, const PocketWeights& w, const float* audio,
                                int64_t n, ThreadPool& pool, int64_t* n_rows);

}  // namespace dasllama::pocket
