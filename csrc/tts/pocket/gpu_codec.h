// The codec seat's work on the device: Mimi's decoder (csrc/tts/pocket/mimi_decoder.h) over a
// call's latents, recorded into one command buffer, with its streaming state kept on the
// device as the CPU decoder keeps it on the host, so a chunk decoded in pieces gives the rows
// the CPU gives:
//
//   quant_proj            a matrix product                       [n, L] -> [n, Co]
//   upsample              conv_tr_depthwise, its K - u tail rows carried
//   decoder transformer   GpuTransformer, its K/V cache and positions carried
//   SEANet convolutions   each one's input buffer starts with its K - 1 history rows and the
//                         call's rows follow them, so the im2col row of output t is the
//                         K * Cin floats from row t on: the matrix stamps read it in place
//                         (x_stride Cin); after the call the last K - 1 rows move to the front
//   SEANet upsampling     a matrix product with the (K * Cout, Cin) repacked weight, then
//                         conv_tr's overlap-add with its K - s tail rows carried
//   ELU, residual adds    rows_elu (written straight into the next convolution's input),
//                         add_scale; a convolution's bias is added by the pass that reads
//                         its output (rounded as a pass of its own would)
//
// A call's command buffer reads the stream's position from mapped memory and its latents from
// a mapped buffer, so it is recorded once per (frames, first call of a stream or not) and
// submitted again for later calls of that shape (the knob vulkan.pocket.replay).
//
// The first call of a stream fills each history as the CPU does: zeros, or copies of the
// first input row (replicate padding). The history moves need a call to bring at least K - 1
// rows to each convolution (gpu_codec_unfit checks it).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "tts/pocket/config.h"
#include "tts/pocket/gpu_ops.h"
#include "tts/pocket/gpu_weights.h"

namespace dasllama::pocket {

// Frames per submission of the codec: a longer call goes in pieces (the stream makes them
// equal to one call). 16 frames keep the largest activation (the last upsampling's product,
// about 1 MB a frame for the English model) far below a storage binding's 128 MiB.
constexpr int64_t kGpuCodecFramesPerSubmit = 16;

class GpuCodec {
public:
    GpuCodec(GpuOps& ops, const PocketConfig& c, const DeviceMimi& w);
    ~GpuCodec();

    // A fresh stream (each text chunk has one).
    void reset();
    // Positions the decoder transformer holds (n * upsample_stride per frame decoded).
    int64_t positions() const { return positions_; }

    // n de-normalized latents [n, L] -> n * frame_size samples of channel 0 appended to
    // `audio`, in submissions of kGpuCodecFramesPerSubmit frames at most. Returns the
    // dispatches submitted and how many submissions were replays. Throws DeviceError (no audio
    // is added; the stream is then spent: reset() before the next call).
    GpuRun decode(const float* latents, int64_t n, std::vector<float>& audio);

private:
    // A streaming Conv1d (stride 1, dilation 1): `in` holds [hist + rows, cin].
    struct Conv {
        const DeviceConv* w = nullptr;
        int64_t hist = 0;
        std::unique_ptr<gpu::Buffer> in;
    };
    struct Stage {
        std::unique_ptr<gpu::Buffer> tail;  // [K - s, Cout]
        std::vector<Conv> conv1, conv2;
    };

    void reserve(int64_t n);
    GpuRun decode_piece(const float* latents, int64_t n, std::vector<float>& audio);
    // Zeroes the stream's tails and convolution histories (recorded in a fresh call).
    void clear_state(gpu::Encoder& e);
    // Records a call of n frames (the stream's first when fresh_).
    void record_piece(gpu::Encoder& e, int64_t n);
    // conv_tr (depthwise when depthwise_w is given) of n_in rows of z into y, then the rows
    // past n_in * stride copied into `tail` for the next call.
    void overlap_add(gpu::Encoder& e, gpu::Buffer& z, gpu::Buffer* depthwise_w, gpu::Buffer& tail,
                     gpu::Buffer* bias, gpu::Buffer& y, int64_t n_in, int64_t channels,
                     int64_t stride, int64_t taps);
    void reserve_positions(int64_t n_ctx);
    // Records conv `cv` over `rows` new rows already in cv.in (from row cv.hist on) into y.
    // bias false: the product alone (the pass after it adds the bias).
    void conv(gpu::Encoder& e, Conv& cv, int64_t rows, gpu::Buffer& y, bool bias = true);
    // The first call's replicate padding of cv.in (its first new row copied into the history).
    void pad_history(gpu::Encoder& e, Conv& cv);
    void keep_history(gpu::Encoder& e, Conv& cv, int64_t rows);

    GpuOps& ops_;
    const PocketConfig& c_;
    const DeviceMimi& w_;
    std::unique_ptr<GpuTransformer> tf_;
    int64_t frames_ = 0;      // the largest call the buffers hold
    int64_t positions_ = 0;
    bool fresh_ = true;
    Conv in_, out_;
    std::vector<Stage> stages_;
    // Mapped: lat_in_ (the call's latents), host_out_ (its audio), pos_base_ (positions_).
    std::unique_ptr<gpu::Buffer> up_tail_, lat_, lat_in_, p_, q_, e_, z_, host_out_, pos_base_;
    // Recordings by (frames, fresh_), valid while the buffers are those of buffers_generation_
    // (reserve moves it on), the transformer's those of tf_generation_ and the knobs those of
    // knobs_generation_.
    std::map<std::pair<int64_t, bool>, std::unique_ptr<gpu::Encoder>> recorded_;
    uint64_t buffers_generation_ = 0, rec_buffers_generation_ = 0, tf_generation_ = 0,
             knobs_generation_ = 0;
};

}  // namespace dasllama::pocket
