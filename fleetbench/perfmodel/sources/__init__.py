"""The converters of published tables into schema-1 records (results/reference/*.jsonl), one module
a source, each runnable as `python -m` with its dotted name and `KEY FILE`: ddl_benchmarks
(HKBU-HPML/ddl-benchmarks), nvidia_dle* (NVIDIA DeepLearningExamples at 729963dd: nvidia_dle the
README table reader and the DGX A100 BERT/ResNet-50 tables, nvidia_dle_bert_txl TF1/TF2 BERT and
PyTorch Transformer-XL, nvidia_dle_frameworks the other BERT, Transformer-XL and ResNet-50 tables,
nvidia_dle_cnn_translation the other CNNs and translation models, nvidia_dle_layers their layer
definitions), dlperf and dlperf_bert (Oneflow-Inc/DLPerf at c89430ba), paddle_fleetx
(PaddlePaddle/PaddleFleetX at 2524271e), csc_ml_benchmarks (CSC's mvsjober/ml-benchmarks at d5c4253c); and of published hybrid-parallel tables into
fleetbench/presets/published/*.yaml for `fleetbench plan --validate`: torchtitan (pytorch/torchtitan's
benchmarks), megatron_moe_modelzoo (yanring/Megatron-MoE-ModelZoo's Qwen3 tables), megatron_bridge (NeMo Megatron-Bridge's performance summary), flagperf (FlagOpen/FlagPerf's Megatron-Core LLM cases), with markdown_tables the pipe-table reader and table writer they share.
results/reference/manifest.yaml says which module wrote which table.
"""
