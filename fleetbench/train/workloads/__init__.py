"""The workloads the benchmark scripts declare over the shared loop: what a model trains on and how
(settings, data, loss) when more than one script shares it — CTR and ResNet18 in both families, the
image CNNs' classification task, the GPT model with Fleet's parallel layers. The loop, the methods
and the run layer that train them are train/'s own modules."""
