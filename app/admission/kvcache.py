"""The rules of a deployment's KV cache and transport (docs/admission.md#the-rules 16, and the
transport of an Ascend pool, docs/rendering.md#kv-cache-attachment): the binding, the dtype the
operator renders, the pool and backend behind it, the ModelArtifact.

Rules that read an InstanceType decline for a deployment being deleted: such a rule refuses when
the type is absent, and a deleted type must not block the update that clears the finalizer. The
validator passes `world=None` then, and every rule below that needs the world returns nothing.
"""

from __future__ import annotations

from app import vocab
from app.admission.model import Notice, Refusal, Subject
from app.api.cluster import KVCacheBackend, KVCachePool, KVCachePoolBinding
from app.engines.common import on_ascend
from app.engines.registry import ENGINES, engine_for
from app.model.context import RenderOptions, backend_protocols, build_context


def cache_chain(subject: Subject) -> tuple[KVCachePoolBinding | None, KVCachePool | None, KVCacheBackend | None]:
    spec = subject.md.spec.kv_cache
    world = subject.world
    if spec is None or world is None:
        return None, None, None
    binding = world.binding(subject.md.metadata.namespace, spec.pool_ref.name)
    pool = world.pools.get(binding.spec.pool_ref.name) if binding else None
    backend = world.backends.get(pool.backend_name or "") if pool else None
    return binding, pool, backend


def new_binding(subject: Subject) -> bool:
    """The binding is new on create, or when the stored object named another one (rule 3 refuses that)."""
    new = subject.md.spec.kv_cache
    if new is None:
        return False
    old = subject.old.spec.kv_cache if subject.old is not None else None
    return old is None or old.pool_ref.name != new.pool_ref.name


def cache_binding(subject: Subject) -> list[Refusal]:
    """Rule 16: a non-empty poolRef; a NEW binding whose pool's member groups disagree on protocol.

    An unchanged binding stays editable if its backend later becomes mixed (a warning says so)."""
    spec = subject.md.spec.kv_cache
    if spec is None:
        return []
    if not spec.pool_ref.name.strip():
        return [Refusal("spec.kvCache.poolRef.name", "is empty",
                        "name a KVCachePoolBinding in this namespace (an administrator creates it to grant the pool), "
                        "or remove spec.kvCache")]
    binding, pool, backend = cache_chain(subject)
    if binding is None or not new_binding(subject):
        return []
    out = _binding_dtype(subject, binding)
    if backend is None:
        return out
    protocols = backend_protocols(backend)
    if len(protocols) > 1:
        out.append(Refusal(
            "spec.kvCache.poolRef.name",
            f"KVCachePoolBinding {spec.pool_ref.name!r} grants pool {pool.metadata.name if pool else '?'!r}, whose "
            f"backend {backend.metadata.name!r} has member groups on different protocols ({', '.join(sorted(protocols))});"
            " a new binding would render only one of them and reads of blocks on the others would fail",
            "have an administrator give every member group of the backend one protocol, or bind a pool whose groups "
            "agree",
        ))
    return out


# The --kv-cache-dtype spellings (docs/cluster-objects.md#kvcachepoolbinding), from the engine registry. Only a value one engine lists
# and the other does not is refused (bf16 on vLLM; fp8 and float16 on SGLang): other values may come
# with newer versions.
KV_CACHE_DTYPES = {name: engine.kv_cache_dtypes for name, engine in ENGINES.items()}


def _binding_dtype(subject: Subject, binding: KVCachePoolBinding) -> list[Refusal]:
    """A new binding whose dtype the operator would render as a --kv-cache-dtype the engine refuses."""
    dtype = binding.spec.domain.dtype
    engine = subject.engine
    if not dtype or not subject.kv_cache_dtype_owned or not any(r.managed for r in subject.md.spec.roles):
        return []
    known = frozenset().union(*KV_CACHE_DTYPES.values())
    accepted = KV_CACHE_DTYPES.get(engine, known)
    if dtype in known and dtype not in accepted:
        return [Refusal(
            "spec.kvCache.poolRef.name",
            f"KVCachePoolBinding {binding.metadata.name!r} has dtype {dtype!r}, which the operator renders as --kv-cache-dtype and {engine} does not accept "
            f"({', '.join(sorted(accepted))})",
            "bind a KVCachePoolBinding whose domain has a dtype this engine reads, or take over the command line of "
            "every role with roles[].command",
        )]
    return []


def cache_notices(subject: Subject) -> list[Notice]:
    """Accepted, but worth knowing: a missing binding holds replicas; an old binding on a mixed backend."""
    spec = subject.md.spec.kv_cache
    if spec is None or subject.world is None or not spec.pool_ref.name.strip():
        return []
    binding, pool, backend = cache_chain(subject)
    ns = subject.md.metadata.namespace
    world = subject.world
    if binding is None:
        absence = world.absence(vocab.KIND_KV_CACHE_POOL_BINDING, spec.pool_ref.name, ns)
        return [Notice("spec.kvCache.poolRef.name", f"KVCachePoolBinding {spec.pool_ref.name!r} {absence} in "
                       f"namespace {ns!r}: no replica starts until an administrator creates or repairs it "
                       "(status reports DomainRegistered=False/BindingNotFound)")]
    if pool is None:
        absence = world.absence(vocab.KIND_KV_CACHE_POOL, binding.spec.pool_ref.name)
        return [Notice("spec.kvCache.poolRef.name", f"KVCachePool {binding.spec.pool_ref.name!r} of binding "
                       f"{spec.pool_ref.name!r} {absence}: replicas wait for it")]
    if backend is None:
        absence = world.absence(vocab.KIND_KV_CACHE_BACKEND, pool.backend_name or "")
        return [Notice("spec.kvCache.poolRef.name", f"KVCacheBackend {pool.backend_name!r} of pool "
                       f"{pool.metadata.name!r} {absence}: replicas wait until an administrator repairs it")]
    protocols = backend_protocols(backend)
    if len(protocols) > 1 and not new_binding(subject):
        first = sorted(protocols)[0]
        return [Notice("spec.kvCache.poolRef.name", f"backend {backend.metadata.name!r} now mixes protocols "
                       f"({', '.join(sorted(protocols))}); this binding keeps rendering {first!r}, and reads of blocks "
                       "on another transport fail: repair the pool")]
    return []


def artifact_notices(subject: Subject) -> list[Notice]:
    ref = subject.md.spec.model.artifact_ref
    if ref is None or subject.world is None:
        return []
    if subject.world.artifact(subject.md.metadata.namespace, ref.name) is None:
        return [Notice("spec.model.artifactRef.name", f"ModelArtifact {ref.name!r} does not exist in namespace "
                       f"{subject.md.metadata.namespace!r}: no Pod is created until it exists and resolves "
                       "(status reports WeightsReady=False/ArtifactNotFound)")]
    return []


def ascend_transfer_protocol(subject: Subject) -> list[Refusal]:
    """vLLM on an Ascend pool transfers over `ascend` (docs/rendering.md#kv-cache-attachment); another
    kvTransfer.protocol is refused."""
    transfer = subject.md.spec.kv_transfer
    if subject.world is None or transfer is None or transfer.protocol in vocab.ASCEND_TRANSFER_PROTOCOLS \
            or not engine_for(subject.engine).ascend_leg:
        return []
    ctx = build_context(subject.md, subject.world, RenderOptions(kv_cache_dtype_owned=subject.kv_cache_dtype_owned))
    ascend = [f"{r.name} ({r.instance_type})" for r in subject.md.spec.roles if on_ascend(ctx, r)]
    if not ascend:
        return []
    return [Refusal("spec.kvTransfer.protocol",
                    f"{transfer.protocol} is not a transport of an Ascend pool, and role(s) {', '.join(ascend)} run "
                    f"{subject.engine} on one, whose direct leg transfers over ascend",
                    "set spec.kvTransfer.protocol to CANN or Auto (or remove spec.kvTransfer)")]
