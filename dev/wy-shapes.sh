# shellcheck shell=bash
# Sourced by dev/gpu-check.sh and dev/ab-wy.sh: the chunk_bwd_wy_dqkg shapes they time, each
# "NAME kda-run-options...".
wy_shapes=(
  "model-bf16 --shape 1,2048,32,128,128 --dtype bf16"
  "model-bf16-hx --shape 1,2048,32,128,128 --dtype bf16 --h-dtype x"
  "model-fp16 --shape 1,2048,32,128,128 --dtype fp16"
  "model-fp32 --shape 1,2048,32,128,128 --dtype fp32"
  "bt16-fp16 --shape 1,2048,32,128,128 --dtype fp16 --chunk-size 16"
  "bt16-fp16-hx --shape 1,2048,32,128,128 --dtype fp16 --chunk-size 16 --h-dtype x"
  "bt32-fp16 --shape 1,2048,32,128,128 --dtype fp16 --chunk-size 32"
  "bt32-fp16-hx --shape 1,2048,32,128,128 --dtype fp16 --chunk-size 32 --h-dtype x"
  "heads16-k64 --shape 2,4096,16,64,64 --dtype bf16"
  "varlen-bf16 --shape 1,8192,32,128,128 --dtype bf16 --seqlens 1300,547,2048,963,271,3063"
  "small-bf16 --shape 1,512,8,128,128 --dtype bf16"
  "small-bf16-hx --shape 1,512,8,128,128 --dtype bf16 --h-dtype x"
  "mid-bf16 --shape 1,1024,8,128,128 --dtype bf16"
)

# wy_shape_options NAME: that shape's `kda run` options (status 1 for an unknown name).
wy_shape_options() {
  local entry
  for entry in "${wy_shapes[@]}"; do
    if [ "${entry%% *}" = "$1" ]; then
      echo "${entry#* }"
      return 0
    fi
  done
  return 1
}
