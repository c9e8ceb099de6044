# Sourced by the generate end-to-end tests: reads a greedy-ids file
# (make_generate_model.py's DECODER.greedy.txt, or ONNX Runtime's
# .ort_greedy.txt: a "prompt: ..." line and a "generated: ..." line) into
# prompt and want (comma-separated ids, as --prompt-ids takes them) and new
# (how many ids were generated). Not run on its own.
#
#   read_greedy FILE

read_greedy() {
  prompt=$(sed -n 's/^prompt: //p' "$1" | tr ' ' ',')
  want=$(sed -n 's/^generated: //p' "$1" | tr ' ' ',')
  new=$(echo "$want" | tr ',' '\n' | wc -l)
}
