"""The zoo's models: what export_zoo.py exports, and what the PyTorch peer
of bench/run_bench.py rebuilds (peers/torch_runner.py), so both run the same
network. Each model is a Spec: a builder with random weights, its input (shape
without the batch, float or token ids) and output names, and a description.

Invariant: a Spec builds the same network for the same seed wherever it is
built (no weights are downloaded), so an exported model, its reference
output and a peer's run of it agree. Full-size models (_full_specs) and tiny
variants with the same op structure (_small_specs, for resources/models/).
"""

import collections
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models import convnext as tv_convnext
from torchvision.models import efficientnet as tv_efficientnet
from torchvision.models import inception as tv_inception
from torchvision.models import regnet as tv_regnet
from torchvision.models import resnet as tv_resnet
from torchvision.models.segmentation import deeplabv3 as tv_deeplabv3
from torchvision.models.video import resnet as tv_video_resnet


# --------------------------------------------------------------------------
# Model definitions written here
# --------------------------------------------------------------------------


class DCGANGenerator(nn.Module):
    """The classic DCGAN generator (Radford et al.; PyTorch examples/dcgan).

    noise [B, nz, 1, 1] -> image [B, nc, 64, 64] in (-1, 1).
    """

    def __init__(self, nz=100, ngf=64, nc=3):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 8, 4, 1, 0, bias=False),  # 4x4
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),  # 8x8
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),  # 16x16
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),  # 32x32
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),  # 64x64
            nn.Tanh(),
        )

    def forward(self, noise):
        return self.main(noise)


def _init_transformer(model, std_of=lambda name: 0.02):
    """BERT's and GPT-2's initializer: normal weights (std_of(module name)),
    small random biases, LayerNorm scales near 1 (module order as registered)."""
    for name, m in model.named_modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, 0.0, std_of(name))
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.bias, 0.0, 0.02)
        if isinstance(m, nn.LayerNorm):
            nn.init.uniform_(m.weight, 0.8, 1.2)
            nn.init.normal_(m.bias, 0.0, 0.02)


class BertEmbeddings(nn.Module):
    def __init__(self, vocab, hidden, max_pos, type_vocab, seq_len, eps):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(max_pos, hidden)
        self.token_type_embeddings = nn.Embedding(type_vocab, hidden)
        self.LayerNorm = nn.LayerNorm(hidden, eps=eps)
        # Fixed sequence length: position and token-type ids are constants, so
        # their Gathers fold into constant tensors at export.
        self.register_buffer("position_ids", torch.arange(seq_len).unsqueeze(0), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, seq_len, dtype=torch.long), persistent=False)

    def forward(self, input_ids):
        x = self.word_embeddings(input_ids)
        x = x + self.position_embeddings(self.position_ids)
        x = x + self.token_type_embeddings(self.token_type_ids)
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads, seq_len):
        super().__init__()
        assert hidden % heads == 0
        self.heads = heads
        self.head_dim = hidden // heads
        self.seq_len = seq_len
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)

    def _split(self, x):
        # [B, S, H] -> [B, heads, S, head_dim]; -1 keeps the batch dynamic
        # without Shape ops in the graph (the sequence length is fixed).
        return x.reshape(-1, self.seq_len, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x):
        q = self._split(self.query(x))
        k = self._split(self.key(x))
        v = self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v)
        return ctx.permute(0, 2, 1, 3).reshape(-1, self.seq_len, self.heads * self.head_dim)


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, intermediate, seq_len, eps):
        super().__init__()
        self.attention = BertSelfAttention(hidden, heads, seq_len)
        self.attention_output = nn.Linear(hidden, hidden)
        self.attention_norm = nn.LayerNorm(hidden, eps=eps)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.output = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x):
        x = self.attention_norm(self.attention_output(self.attention(x)) + x)
        h = F.gelu(self.intermediate(x))  # exact (erf) GELU
        return self.output_norm(self.output(h) + x)


class BertEncoder(nn.Module):
    """BERT encoder: input_ids int64 [B, S] -> last hidden state [B, S, H].

    No attention mask and no pooler; token types are all 0.
    """

    def __init__(self, vocab=30522, hidden=768, layers=12, heads=12, intermediate=3072,
                 max_pos=512, type_vocab=2, seq_len=128, eps=1e-12):
        super().__init__()
        self.vocab = vocab
        self.seq_len = seq_len
        self.embeddings = BertEmbeddings(vocab, hidden, max_pos, type_vocab, seq_len, eps)
        self.layers = nn.ModuleList(
            [BertLayer(hidden, heads, intermediate, seq_len, eps) for _ in range(layers)])
        _init_transformer(self)  # BERT's initializer (std 0.02), small random biases

    def forward(self, input_ids):
        x = self.embeddings(input_ids)
        for layer in self.layers:
            x = layer(x)
        return x


class SmallResNet(nn.Module):
    """torchvision's ResNet layout (7x7 stem, maxpool, 4 stages of torchvision
    Bottleneck blocks, global average pool, fc) with configurable widths."""

    def __init__(self, layers, widths, groups=1, width_per_group=64, num_classes=100):
        super().__init__()
        self.inplanes = widths[0]
        self.groups = groups
        self.base_width = width_per_group
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        stages = []
        for i, (n, w) in enumerate(zip(layers, widths)):
            stages.append(self._make_layer(w, n, stride=1 if i == 0 else 2))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[-1] * tv_resnet.Bottleneck.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, planes, blocks, stride):
        block = tv_resnet.Bottleneck
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride=stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample, self.groups, self.base_width)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, groups=self.groups, base_width=self.base_width))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


class SmallInception(nn.Module):
    """Inception v3 built from torchvision's own InceptionA..E blocks with every
    channel count divided by `div` (a scaling conv_block), one block of each
    kind: stem, A, B, C, D, E, global average pool, fc."""

    def __init__(self, div=8, num_classes=100):
        super().__init__()

        def conv(cin, cout, **kw):
            if cin != 3:
                assert cin % div == 0, cin
                cin //= div
            assert cout % div == 0, cout
            return tv_inception.BasicConv2d(cin, cout // div, **kw)

        self.Conv2d_1a_3x3 = conv(3, 32, kernel_size=3, stride=2)
        self.Conv2d_2a_3x3 = conv(32, 32, kernel_size=3)
        self.Conv2d_2b_3x3 = conv(32, 64, kernel_size=3, padding=1)
        self.maxpool1 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Conv2d_3b_1x1 = conv(64, 80, kernel_size=1)
        self.Conv2d_4a_3x3 = conv(80, 192, kernel_size=3)
        self.maxpool2 = nn.MaxPool2d(kernel_size=3, stride=2)
        self.Mixed_5b = tv_inception.InceptionA(192, pool_features=32, conv_block=conv)  # -> 256
        self.Mixed_6a = tv_inception.InceptionB(256, conv_block=conv)  # -> 736
        self.Mixed_6b = tv_inception.InceptionC(736, channels_7x7=128, conv_block=conv)  # -> 768
        self.Mixed_7a = tv_inception.InceptionD(768, conv_block=conv)  # -> 1280
        self.Mixed_7b = tv_inception.InceptionE(1280, conv_block=conv)  # -> 2048
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2048 // div, num_classes)

    def forward(self, x):
        x = self.Conv2d_2b_3x3(self.Conv2d_2a_3x3(self.Conv2d_1a_3x3(x)))
        x = self.maxpool1(x)
        x = self.maxpool2(self.Conv2d_4a_3x3(self.Conv2d_3b_1x1(x)))
        x = self.Mixed_7b(self.Mixed_7a(self.Mixed_6b(self.Mixed_6a(self.Mixed_5b(x)))))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


class SmallVideoResNet(nn.Module):
    """torchvision's R3D layout (3x7x7 stem, 4 stages of torchvision video
    BasicBlock with Conv3DSimple, global average pool, fc) with small widths."""

    def __init__(self, layers=(1, 1, 1, 1), widths=(8, 16, 32, 64), num_classes=100):
        super().__init__()
        self.inplanes = widths[0]
        self.stem = nn.Sequential(
            nn.Conv3d(3, widths[0], kernel_size=(3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3), bias=False),
            nn.BatchNorm3d(widths[0]),
            nn.ReLU(inplace=True))
        stages = []
        for i, (n, w) in enumerate(zip(layers, widths)):
            stages.append(self._make_layer(w, n, stride=1 if i == 0 else 2))
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool3d((1, 1, 1))
        self.fc = nn.Linear(widths[-1], num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def _make_layer(self, planes, blocks, stride):
        block, conv = tv_video_resnet.BasicBlock, tv_video_resnet.Conv3DSimple
        downsample = None
        if stride != 1 or self.inplanes != planes:
            downsample = nn.Sequential(
                nn.Conv3d(self.inplanes, planes, 1, stride=conv.get_downsample_stride(stride), bias=False),
                nn.BatchNorm3d(planes))
        layers = [block(self.inplanes, planes, conv, stride, downsample)]
        self.inplanes = planes
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes, conv))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.stem(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(self.avgpool(x).flatten(1))


def _gelu_tanh(x):
    """GPT-2's GELU: the tanh approximation, written out."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, hidden, heads, seq_len):
        super().__init__()
        assert hidden % heads == 0
        self.hidden = hidden
        self.heads = heads
        self.head_dim = hidden // heads
        self.seq_len = seq_len
        self.c_attn = nn.Linear(hidden, 3 * hidden)  # fused q, k, v projection
        self.c_proj = nn.Linear(hidden, hidden)
        # Causal mask: position i attends to positions <= i (lower triangle);
        # masked scores are replaced by -1e4 as in GPT-2.
        self.register_buffer("causal_mask", torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool))
                             .view(1, 1, seq_len, seq_len), persistent=False)
        self.register_buffer("masked_score", torch.tensor(-1e4), persistent=False)

    def _split(self, x):
        # [B, S, H] -> [B, heads, S, head_dim] with a fixed sequence length (no Shape ops).
        return x.reshape(-1, self.seq_len, self.heads, self.head_dim).permute(0, 2, 1, 3)

    def forward(self, x):
        q, k, v = self.c_attn(x).split(self.hidden, dim=2)
        q, k, v = self._split(q), self._split(k), self._split(v)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        scores = torch.where(self.causal_mask, scores, self.masked_score)
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v)
        return self.c_proj(ctx.permute(0, 2, 1, 3).reshape(-1, self.seq_len, self.hidden))


class GPT2Block(nn.Module):
    def __init__(self, hidden, heads, seq_len, eps):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=eps)
        self.attn = GPT2Attention(hidden, heads, seq_len)
        self.ln_2 = nn.LayerNorm(hidden, eps=eps)
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.c_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))  # pre-LayerNorm
        return x + self.c_proj(_gelu_tanh(self.c_fc(self.ln_2(x))))


class GPT2Decoder(nn.Module):
    """GPT-2-style decoder stack: input_ids int64 [B, S] -> last hidden state
    [B, S, H] after the final LayerNorm (no LM head).

    Token + learned position embeddings, pre-LayerNorm blocks with causal
    self-attention (fused qkv projection) and a 4x GELU (tanh) MLP.
    """

    def __init__(self, vocab=50257, hidden=768, layers=12, heads=12, max_pos=1024, seq_len=128, eps=1e-5):
        super().__init__()
        self.vocab = vocab
        self.seq_len = seq_len
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(max_pos, hidden)
        # Fixed sequence length: the position Gather folds into a constant at export.
        self.register_buffer("position_ids", torch.arange(seq_len).unsqueeze(0), persistent=False)
        self.blocks = nn.ModuleList([GPT2Block(hidden, heads, seq_len, eps) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden, eps=eps)
        # GPT-2's initializer: residual output projections scaled by 1/sqrt(2 * layers).
        _init_transformer(self, lambda name: 0.02 / math.sqrt(2 * layers) if name.endswith("c_proj") else 0.02)

    def forward(self, input_ids):
        x = self.wte(input_ids) + self.wpe(self.position_ids)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x)


class SegmentationOut(nn.Module):
    """Wraps a torchvision segmentation model and returns only its "out" tensor."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def _randomize_tv(model):
    """Random LayerNorm affine parameters (torch initializes them to 1 and 0)
    and small random biases where torchvision initializes biases to 0, as
    after training (identical zero biases would also be merged by the exporter
    into one initializer plus Identity nodes). Applied to the torchvision
    models from mobilenet_v3_large on; the older entries keep torchvision's
    initialization so that their files stay as they are. Uses the global
    generator, which is seeded before the model is built; BatchNorms are set
    at export (_randomize_norms)."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.LayerNorm) and m.elementwise_affine:
                nn.init.uniform_(m.weight, 0.8, 1.2)
                nn.init.normal_(m.bias, 0.0, 0.02)
        for name, p in model.named_parameters():
            if name.endswith("bias") and not bool(p.any()):
                nn.init.normal_(p, 0.0, 0.02)
    return model


def _convnext(model):
    """torchvision ConvNeXt (see _randomize_tv) with random per-channel layer
    scales in [0.1, 0.5] (torchvision initializes them to 1e-6, which would
    make every block's contribution vanish)."""
    model = _randomize_tv(model)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, tv_convnext.CNBlock):
                nn.init.uniform_(m.layer_scale, 0.1, 0.5)
    return model


class _AttentionWithoutFastPath(nn.Module):
    """Runs an nn.MultiheadAttention through its regular (unfused) code path.

    In eval mode without grad, torch 1.13's nn.MultiheadAttention takes a fused
    CPU fast path (aten::_native_multi_head_attention) that the ONNX exporter
    cannot export. It skips that path when grad is enabled and its weights
    require grad; the computation (and the exported graph: MatMul, Softmax, ...)
    is the same. Grad mode does not change what is traced."""

    def __init__(self, mha):
        super().__init__()
        self.mha = mha

    def forward(self, *args, **kwargs):
        with torch.enable_grad():
            return self.mha(*args, **kwargs)


def _vit(model):
    """torchvision VisionTransformer (see _randomize_tv) with a random class
    token and classifier weight (torchvision initializes the head to zeros,
    which would make the output identically 0), its attention exportable
    (see above)."""
    model = _randomize_tv(model)
    with torch.no_grad():
        nn.init.normal_(model.class_token, 0.0, 0.02)
        nn.init.normal_(model.heads.head.weight, 0.0, 0.02)
    for layer in model.encoder.layers:
        layer.self_attention = _AttentionWithoutFastPath(layer.self_attention)
    return model


def _deeplabv3_mobilenet_v3(width_mult=1.0, head_channels=256, num_classes=21):
    """DeepLabV3 on a dilated MobileNetV3-Large backbone (output stride 16, no
    aux head), built as torchvision's deeplabv3_mobilenet_v3_large does, with
    an optional channel multiplier on the backbone and a configurable width of
    the ASPP head (torchvision's DeepLabHead has 256). Returns "out" only."""
    backbone = torchvision.models.mobilenet_v3_large(weights=None, width_mult=width_mult, dilated=True)
    model = tv_deeplabv3._deeplabv3_mobilenetv3(backbone, num_classes, False)
    if head_channels != 256:  # DeepLabHead with a narrower ASPP and 3x3 conv
        in_ch = model.classifier[0].convs[0][0].in_channels
        model.classifier = nn.Sequential(
            tv_deeplabv3.ASPP(in_ch, [12, 24, 36], out_channels=head_channels),
            nn.Conv2d(head_channels, head_channels, 3, padding=1, bias=False),
            nn.BatchNorm2d(head_channels),
            nn.ReLU(),
            nn.Conv2d(head_channels, num_classes, 1))
    return SegmentationOut(_randomize_tv(model))


# --------------------------------------------------------------------------
# Zoo
# --------------------------------------------------------------------------

Spec = collections.namedtuple(
    "Spec", "name build input_name input_shape input_kind output_name description calibration_batch",
    defaults=(2,))
# input_shape excludes the batch; input_kind is "float" (standard normal) or
# ("ids", vocab) (uniform int64 token ids in [0, vocab)); calibration_batch is
# the size of the random batch that sets the BatchNorm statistics (see
# _randomize_norms; larger where a batch of 2 gives too noisy statistics).


def _full_specs():
    tvm = torchvision.models
    return [
        Spec("resnet50", lambda: tvm.resnet50(weights=None), "input", (3, 224, 224), "float", "output",
             "torchvision resnet50, 224x224, 1000 classes"),
        Spec("resnext50_32x4d", lambda: tvm.resnext50_32x4d(weights=None), "input", (3, 224, 224), "float",
             "output", "torchvision resnext50_32x4d (grouped 3x3 convs, 32 groups), 224x224"),
        Spec("mobilenet_v2", lambda: tvm.mobilenet_v2(weights=None), "input", (3, 224, 224), "float", "output",
             "torchvision mobilenet_v2 (depthwise convs, inverted residuals, ReLU6), 224x224"),
        Spec("inception_v3",
             lambda: tvm.inception_v3(weights=None, aux_logits=False, init_weights=False),
             "input", (3, 299, 299), "float", "output",
             "torchvision inception_v3 (aux_logits=False, init_weights=False), 299x299"),
        Spec("r3d_18", lambda: tvm.video.r3d_18(weights=None), "input", (3, 16, 112, 112), "float", "output",
             "torchvision video r3d_18 (3D convs), clip 3x16x112x112, 400 classes"),
        Spec("dcgan", lambda: DCGANGenerator(nz=100, ngf=64, nc=3), "noise", (100, 1, 1), "float", "image",
             "DCGAN generator nz=100 ngf=64 nc=3 (ConvTranspose2d+BatchNorm+ReLU, Tanh), 64x64 output"),
        Spec("bert_base", lambda: BertEncoder(), "input_ids", (128,), ("ids", 30522), "last_hidden_state",
             "BERT-base encoder: 12 layers, hidden 768, 12 heads, intermediate 3072, exact GELU, "
             "seq 128, vocab 30522; no attention mask, no pooler"),
        Spec("mobilenet_v3_large", lambda: _randomize_tv(tvm.mobilenet_v3_large(weights=None)),
             "input", (3, 224, 224), "float", "output",
             "torchvision mobilenet_v3_large (depthwise convs, squeeze-excitation, HardSwish/HardSigmoid), "
             "224x224"),
        Spec("efficientnet_b0", lambda: _randomize_tv(tvm.efficientnet_b0(weights=None)),
             "input", (3, 224, 224), "float", "output",
             "torchvision efficientnet_b0 (MBConv, squeeze-excitation, SiLU), 224x224"),
        Spec("shufflenet_v2_x1_0", lambda: _randomize_tv(tvm.shufflenet_v2_x1_0(weights=None)),
             "input", (3, 224, 224), "float", "output",
             "torchvision shufflenet_v2_x1_0 (channel split, channel shuffle, depthwise convs), 224x224"),
        Spec("regnet_y_400mf", lambda: _randomize_tv(tvm.regnet_y_400mf(weights=None)),
             "input", (3, 224, 224), "float", "output",
             "torchvision regnet_y_400mf (grouped convs, squeeze-excitation, residual Add), 224x224"),
        Spec("convnext_tiny", lambda: _convnext(tvm.convnext_tiny(weights=None)),
             "input", (3, 224, 224), "float", "output",
             "torchvision convnext_tiny (7x7 depthwise convs, LayerNorm, exact GELU, layer scale), 224x224; "
             "random layer scales"),
        Spec("vit_b_16", lambda: _vit(tvm.vit_b_16(weights=None)),
             "input", (3, 224, 224), "float", "output",
             "torchvision vit_b_16: patch 16, 12 layers, hidden 768, 12 heads, MLP 3072, exact GELU, 224x224"),
        Spec("deeplabv3_mobilenet_v3_large", lambda: _deeplabv3_mobilenet_v3(), "input", (3, 520, 520),
             "float", "output",
             "torchvision deeplabv3_mobilenet_v3_large (dilated MobileNetV3-Large, ASPP, bilinear Resize), "
             "21 classes, 520x520, no aux head; \"out\" output only",
             calibration_batch=8),  # the ASPP pooling branch's BatchNorm sees one value per sample
        Spec("gpt2", lambda: GPT2Decoder(), "input_ids", (128,), ("ids", 50257), "last_hidden_state",
             "GPT-2-style decoder (GPT-2 small layout): 12 layers, hidden 768, 12 heads, causal mask, "
             "pre-LayerNorm, tanh GELU MLP 3072, final LayerNorm, seq 128, vocab 50257; no LM head"),
    ]


def _small_specs():
    return [
        Spec("resnet50_small",
             lambda: SmallResNet([2, 2, 2, 2], [8, 16, 32, 64]),
             "input", (3, 64, 64), "float", "output",
             "ResNet of torchvision Bottleneck blocks (residual Add), layers [2,2,2,2], "
             "widths 8/16/32/64 (x4 out), 64x64 input, 100 classes"),
        Spec("resnext50_32x4d_small",
             lambda: SmallResNet([2, 2, 2, 2], [8, 16, 32, 64], groups=4, width_per_group=32),
             "input", (3, 64, 64), "float", "output",
             "ResNeXt of torchvision Bottleneck blocks with grouped 3x3 convs (4 groups, "
             "bottleneck width 2x planes as in 32x4d), layers [2,2,2,2], 64x64 input, 100 classes"),
        Spec("mobilenet_v2_small",
             lambda: torchvision.models.MobileNetV2(num_classes=100, width_mult=0.25),
             "input", (3, 64, 64), "float", "output",
             "torchvision MobileNetV2(width_mult=0.25, num_classes=100): depthwise convs, "
             "inverted residuals, ReLU6 (Clip); 64x64 input"),
        Spec("inception_v3_small",
             lambda: SmallInception(div=8, num_classes=100),
             "input", (3, 139, 139), "float", "output",
             "Inception v3 stem + one each of torchvision InceptionA/B/C/D/E with channels / 8 "
             "(multi-branch Concat, 1x7/7x1 and 1x3/3x1 convs, AveragePool branches), 139x139 input"),
        Spec("r3d_18_small",
             lambda: SmallVideoResNet((1, 1, 1, 1), (8, 16, 32, 64), num_classes=100),
             "input", (3, 8, 32, 32), "float", "output",
             "R3D of torchvision video BasicBlocks (Conv3d, residual Add), widths 8/16/32/64, "
             "clip 3x8x32x32, 100 classes"),
        Spec("dcgan_small", lambda: DCGANGenerator(nz=16, ngf=8, nc=3), "noise", (16, 1, 1), "float", "image",
             "DCGAN generator nz=16 ngf=8 nc=3 (same 5 ConvTranspose2d layers), 64x64 output"),
        Spec("bert_small",
             lambda: BertEncoder(vocab=1000, hidden=64, layers=2, heads=4, intermediate=256,
                                 max_pos=64, seq_len=16),
             "input_ids", (16,), ("ids", 1000), "last_hidden_state",
             "BERT encoder: 2 layers, hidden 64, 4 heads, intermediate 256, exact GELU, seq 16, vocab 1000"),
        Spec("mobilenet_v3_large_small",
             lambda: _randomize_tv(
                 torchvision.models.mobilenet_v3_large(weights=None, width_mult=0.25, num_classes=100)),
             "input", (3, 64, 64), "float", "output",
             "torchvision MobileNetV3-Large(width_mult=0.25, num_classes=100): depthwise convs, "
             "squeeze-excitation, HardSwish/HardSigmoid; 64x64 input"),
        Spec("efficientnet_b0_small",
             lambda: _randomize_tv(tv_efficientnet.EfficientNet(
                 tv_efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.5)[0],
                 dropout=0.2, num_classes=100)),
             "input", (3, 64, 64), "float", "output",
             "torchvision EfficientNet-B0 layout with width_mult=0.25, depth_mult=0.5 (MBConv, "
             "squeeze-excitation, SiLU, residual Add), 64x64 input, 100 classes",
             calibration_batch=8),  # 2x2 final feature maps: 2 samples give noisy BatchNorm statistics
        Spec("shufflenet_v2_small",
             lambda: _randomize_tv(
                 torchvision.models.ShuffleNetV2([2, 2, 2], [16, 32, 64, 128, 256], num_classes=100)),
             "input", (3, 64, 64), "float", "output",
             "torchvision ShuffleNetV2 with stages [2,2,2], channels 16/32/64/128/256 (channel split, "
             "channel shuffle, depthwise convs), 64x64 input, 100 classes"),
        Spec("regnet_y_400mf_small",
             lambda: _randomize_tv(tv_regnet.RegNet(
                 tv_regnet.BlockParams(depths=[1, 1, 2, 2], widths=[16, 32, 64, 128], group_widths=[8, 8, 8, 8],
                                       bottleneck_multipliers=[1.0] * 4, strides=[2] * 4, se_ratio=0.25),
                 num_classes=100, stem_width=16)),
             "input", (3, 64, 64), "float", "output",
             "torchvision RegNet Y blocks (grouped convs with group width 8, squeeze-excitation, residual "
             "Add), depths [1,1,2,2], widths 16/32/64/128, 64x64 input, 100 classes"),
        Spec("convnext_tiny_small",
             lambda: _convnext(tv_convnext.ConvNeXt(
                 [tv_convnext.CNBlockConfig(16, 32, 1), tv_convnext.CNBlockConfig(32, 64, 1),
                  tv_convnext.CNBlockConfig(64, 128, 2), tv_convnext.CNBlockConfig(128, None, 1)],
                 stochastic_depth_prob=0.1, num_classes=100)),
             "input", (3, 64, 64), "float", "output",
             "torchvision ConvNeXt blocks (7x7 depthwise convs, LayerNorm, exact GELU, layer scale), "
             "depths [1,1,2,1], widths 16/32/64/128, 64x64 input, 100 classes; random layer scales"),
        Spec("vit_b_16_small",
             lambda: _vit(torchvision.models.VisionTransformer(
                 image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=64, mlp_dim=256,
                 num_classes=100)),
             "input", (3, 32, 32), "float", "output",
             "torchvision VisionTransformer: 32x32 image, patch 8, 2 layers, hidden 64, 4 heads, MLP 256, "
             "exact GELU, 100 classes"),
        Spec("deeplabv3_mobilenet_v3_small",
             lambda: _deeplabv3_mobilenet_v3(width_mult=0.25, head_channels=16),
             "input", (3, 64, 64), "float", "output",
             "DeepLabV3 on torchvision's dilated MobileNetV3-Large (width_mult=0.25), ASPP with 16 "
             "channels, bilinear Resize, 21 classes, 64x64 input; \"out\" output only",
             calibration_batch=8),  # 4x4 feature maps, and the ASPP pooling branch: see the full model
        Spec("gpt2_small",
             lambda: GPT2Decoder(vocab=1000, hidden=64, layers=2, heads=4, max_pos=64, seq_len=16),
             "input_ids", (16,), ("ids", 1000), "last_hidden_state",
             "GPT-2-style decoder: 2 layers, hidden 64, 4 heads, causal mask, pre-LayerNorm, tanh GELU "
             "MLP 256, final LayerNorm, seq 16, vocab 1000"),
    ]


# base name -> (extra name, opset): older-opset test variants written with --small
SMALL_EXTRAS = {
    "resnet50_small": ("resnet50_small_opset9", 9),
    "bert_small": ("bert_small_opset13", 13),
}

ALIASES = {"resnext50": "resnext50_32x4d", "bert": "bert_base", "mobilenetv2": "mobilenet_v2",
           "inception": "inception_v3", "r3d": "r3d_18", "mobilenetv3": "mobilenet_v3_large",
           "mobilenet_v3": "mobilenet_v3_large", "efficientnet": "efficientnet_b0",
           "shufflenet": "shufflenet_v2_x1_0", "shufflenet_v2": "shufflenet_v2_x1_0",
           "regnet": "regnet_y_400mf", "convnext": "convnext_tiny", "vit": "vit_b_16",
           "deeplabv3": "deeplabv3_mobilenet_v3_large", "deeplabv3_mobilenet_v3": "deeplabv3_mobilenet_v3_large"}

# full name -> small name, where it is not just <name>_small
SMALL_NAMES = {"bert_base": "bert_small", "shufflenet_v2_x1_0": "shufflenet_v2_small",
               "deeplabv3_mobilenet_v3_large": "deeplabv3_mobilenet_v3_small"}
