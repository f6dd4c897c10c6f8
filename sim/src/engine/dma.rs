//! DMA: `dma_copy` between HBM and SBUF (and SBUF↔SBUF, HBM↔HBM), with access patterns on both
//! sides, a cast through fp32 when dtypes differ, read-modify-write add at the destination, and
//! indirect (index-driven) gather/scatter. DMA never touches PSUM.

use super::{Access, Ctx};
use crate::error::{AtOperand, ErrorKind, OpResult};
use crate::mem::AccessPattern;
use crate::program::{DgeMode, DmaCompute, DmaCopy, DmaTranspose, Indirect, IndirectSide, OobMode};

pub fn dma_copy(ctx: &mut Ctx, i: &DmaCopy) -> OpResult<()> {
    ctx.check_access("src", &i.src, Access::Read)?;
    ctx.check_access("dst", &i.dst, Access::Write)?;
    // A packed MX container moves as bytes: no conversion to or from it, no accumulation.
    if (i.src.dtype.is_packed() || i.dst.dtype.is_packed()) && (i.src.dtype != i.dst.dtype || i.accumulate) {
        let bad = if i.dst.dtype.is_packed() { &i.dst } else { &i.src };
        return Err(ErrorKind::UnsupportedDType {
            dtype: bad.dtype.name(),
            why: "a packed MX container is copied only to the same dtype, without accumulate".into(),
        })
        .at(if i.dst.dtype.is_packed() { "dst" } else { "src" });
    }
    match &i.indirect {
        None => {
            if i.src.num_elems() != i.dst.num_elems() {
                return Err(ErrorKind::ShapeMismatch(format!(
                    "src has {} elements, dst {}",
                    i.src.num_elems(),
                    i.dst.num_elems()
                )))
                .at("dst");
            }
            copy_pair(ctx, &i.src, &i.dst, i.accumulate)?;
        }
        Some(ind) => indirect_copy(ctx, i, ind)?,
    }
    let bytes = (i.dst.num_elems() * i.dst.dtype.size()) as u64;
    ctx.stats.dma_bytes += bytes;
    ctx.stats.elements.dma += i.dst.num_elems() as u64;
    // One transfer on one DMA queue (docs/timeline.md).
    ctx.stats.est_ns.dma += transfer_ns(ctx, &i.src, &i.dst, i.accumulate, bytes);
    Ok(())
}

/// Queue time of one transfer: the fixed cost plus the bytes at the queue's bandwidth, capped
/// at the queue's fair share of HBM bandwidth for the HBM traffic it makes. The queues share one
/// HBM (`hbm_bytes_per_ns`), which the schedule does not model as a resource; an HBM → HBM copy
/// moves every byte through HBM twice (an accumulating write three times), so 16 queues copying
/// at 17 B/ns would need 544 B/ns of the 410 a Trn1 core has. Each queue is therefore held to
/// `hbm_bytes_per_ns / dma_queues` of HBM traffic, which keeps the aggregate within HBM bandwidth
/// however many queues run (the roofline bound found the gap: docs/performance.md, "Roofline").
/// A transfer touching HBM once is unaffected (410 / 16 = 25.6 B/ns > 17).
fn transfer_ns(ctx: &Ctx, src: &AccessPattern, dst: &AccessPattern, accumulate: bool, bytes: u64) -> f64 {
    let t = &ctx.target;
    let hbm_passes = u32::from(!src.mem.is_on_chip()) + u32::from(!dst.mem.is_on_chip()) * (1 + u32::from(accumulate));
    let mut rate = t.dma_queue_bytes_per_ns;
    if hbm_passes > 0 {
        rate = rate.min(t.hbm_bytes_per_ns / (t.dma_queues.max(1) as f64 * f64::from(hbm_passes)));
    }
    t.dma_fixed_ns + bytes as f64 / rate
}

/// Copies (or accumulates) `src` into `dst`, element order partition-major on both sides.
fn copy_pair(ctx: &mut Ctx, src: &AccessPattern, dst: &AccessPattern, accumulate: bool) -> OpResult<()> {
    if accumulate {
        let a = ctx.mem.read_f32(dst).at("dst")?;
        let b = ctx.mem.read_f32(src).at("src")?;
        let sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        ctx.mem.write_f32(dst, &sum, ctx.rounding).at("dst")?;
    } else if src.dtype == dst.dtype {
        let from = ctx.mem.resolve(src).at("src")?;
        ctx.mem.check_written(&from).at("src")?;
        let to = ctx.mem.resolve(dst).at("dst")?;
        ctx.mem.copy_resolved(&from, &to).at("dst")?;
    } else {
        let v = ctx.mem.read_f32(src).at("src")?;
        ctx.mem.write_f32(dst, &v, ctx.rounding).at("dst")?;
        // Back to the pool (a dropped multi-MiB buffer is faulted in again by the next read).
        ctx.mem.recycle_f32(v);
    }
    Ok(())
}

/// Gather (`side: src`) or scatter (`side: dst`): row `p` of the indirect side starts
/// `index[p] * row_step` elements past its offset. The indirect side must be in HBM; the index
/// tensor is an integer tensor in SBUF with one element per row.
fn indirect_copy(ctx: &mut Ctx, i: &DmaCopy, ind: &Indirect) -> OpResult<()> {
    let (direct, indirect, direct_name, indirect_name) = match ind.side {
        IndirectSide::Src => (&i.dst, &i.src, "dst", "src"),
        IndirectSide::Dst => (&i.src, &i.dst, "src", "dst"),
    };
    if indirect.mem.is_on_chip() {
        return Err(ErrorKind::Invalid("the indirect side of a DMA must be in HBM".into())).at(indirect_name);
    }
    ctx.check_access("index", &ind.index, Access::Read)?;
    if ind.index.mem != crate::mem::MemSpace::Sbuf || ind.index.dtype.is_float() {
        return Err(ErrorKind::Invalid("index must be an integer tensor in SBUF".into())).at("index");
    }
    let rows = direct.partitions;
    if ind.index.num_elems() != rows {
        return Err(ErrorKind::ShapeMismatch(format!(
            "{} indices for {rows} rows",
            ind.index.num_elems()
        )))
        .at("index");
    }
    // Validates the whole direct side once (bounds of every row) before the per-row copies.
    ctx.mem.resolve(direct).at(direct_name)?;
    let idx = ctx.mem.read_i64(&ind.index).at("index")?;
    if indirect.free_elems() != direct.free_elems() {
        return Err(ErrorKind::ShapeMismatch(format!(
            "indirect rows have {} elements, direct rows {}",
            indirect.free_elems(),
            direct.free_elems()
        )))
        .at(indirect_name);
    }
    let size = indirect.dtype.size() as i64;
    for (p, &k) in idx.iter().enumerate() {
        // Byte offset of the row; an overflowing product is out of range like any other.
        let offset = k
            .checked_mul(ind.row_step)
            .and_then(|e| e.checked_mul(size))
            .and_then(|b| b.checked_add(i64::try_from(indirect.offset).ok()?))
            .filter(|&b| b >= 0);
        let row_ind = AccessPattern {
            partitions: 1,
            partition_step: 0,
            offset: offset.unwrap_or(0) as u64,
            ..indirect.clone()
        };
        let row_dir = row_of(direct, p);
        let in_bounds = offset.is_some() && ctx.mem.resolve(&row_ind).is_ok();
        if !in_bounds {
            match ind.oob {
                OobMode::Skip => continue,
                OobMode::Error => {
                    return Err(ErrorKind::Invalid(format!(
                        "index {k} of row {p} addresses outside the tensor"
                    )))
                    .at("index");
                }
            }
        }
        let (s, d) = match ind.side {
            IndirectSide::Src => (&row_ind, &row_dir),
            IndirectSide::Dst => (&row_dir, &row_ind),
        };
        copy_pair(ctx, s, d, i.accumulate).map_err(|mut e| {
            if e.operand.is_none() {
                e.operand = Some(direct_name.to_string());
            }
            e
        })?;
    }
    Ok(())
}

/// Row `p` of an access pattern as a one-row pattern.
fn row_of(ap: &AccessPattern, p: usize) -> AccessPattern {
    if ap.mem.is_on_chip() {
        AccessPattern {
            start_partition: ap.start_partition + p,
            partitions: 1,
            ..ap.clone()
        }
    } else {
        // The whole pattern was resolved (so bounds-checked) before: these products fit.
        let size = ap.dtype.size() as i64;
        let offset = (ap.offset as i64).wrapping_add((p as i64).wrapping_mul(ap.partition_step).wrapping_mul(size));
        AccessPattern {
            partitions: 1,
            partition_step: 0,
            offset: offset as u64,
            ..ap.clone()
        }
    }
}

/// `dma_transpose`: the source tile's dims are `[partitions (rows), free…]` (2 to 4 of them);
/// the destination has the same rank (NKI 0.4) and the source's dims permuted by `[1, 0]`,
/// `[2, 1, 0]` or `[3, 1, 2, 0]` (NKI docs). Same dtypes copy bits; different dtypes convert
/// through fp32, as `dma_copy`. `dge_mode` is `unknown` or `hwdge` (the modes AWS allows a direct
/// transpose); `hwdge` needs the core's hardware DGE and obeys its limits
/// ([`crate::Target::dma_transpose_hwdge`]). An indirect side is refused (not modelled).
pub fn dma_transpose(ctx: &mut Ctx, i: &DmaTranspose) -> OpResult<()> {
    if let Some(ind) = &i.indirect {
        let side = match ind.side {
            IndirectSide::Src => "src",
            IndirectSide::Dst => "dst",
        };
        return Err(ErrorKind::Unsupported(format!(
            "dma_transpose with an indirect {side} is not modelled: AWS's indirect transpose (a gather \
             that transposes, lowered to a software-DGE dma_gather_transpose) has no semantics in this \
             simulator; gather with dma_copy, then transpose the tile"
        )))
        .at(side);
    }
    ctx.check_access("src", &i.src, Access::Read)?;
    ctx.check_access("dst", &i.dst, Access::Write)?;
    let dims = |ap: &AccessPattern| {
        let mut d = vec![ap.partitions];
        d.extend(ap.free_shape());
        d
    };
    let s = dims(&i.src);
    let perm: &[usize] = match s.len() {
        2 => &[1, 0],
        3 => &[2, 1, 0],
        4 => &[3, 1, 2, 0],
        n => {
            return Err(ErrorKind::Invalid(format!(
                "dma_transpose takes a 2-, 3- or 4-dimensional tile, got {n} dimensions"
            )))
            .at("src");
        }
    };
    let d = dims(&i.dst);
    if d.len() != s.len() {
        return Err(ErrorKind::ShapeMismatch(format!(
            "dma_transpose's dst must have src's rank (NKI 0.4): src is {s:?} ({} dimensions), dst {d:?} ({})",
            s.len(),
            d.len()
        )))
        .at("dst");
    }
    let want: Vec<usize> = perm.iter().map(|&a| s[a]).collect();
    if d != want {
        return Err(ErrorKind::ShapeMismatch(format!(
            "src is {s:?}, so dst must be {want:?}, got {d:?}"
        )))
        .at("dst");
    }
    check_dge_mode(ctx, i, &s)?;
    // Row-major strides of the source; destination element k (row-major over `want`) reads the
    // source element whose index along source axis perm[j] is the destination's index j.
    let mut stride = vec![1usize; s.len()];
    for a in (0..s.len().saturating_sub(1)).rev() {
        stride[a] = stride[a + 1] * s[a + 1];
    }
    let total: usize = s.iter().product();
    let mut gather = Vec::with_capacity(total);
    let mut idx = vec![0usize; want.len()];
    for _ in 0..total {
        gather.push(idx.iter().zip(perm).map(|(&x, &a)| x * stride[a]).sum::<usize>());
        for j in (0..idx.len()).rev() {
            idx[j] += 1;
            if idx[j] < want[j] {
                break;
            }
            idx[j] = 0;
        }
    }
    if i.src.dtype == i.dst.dtype {
        let v = ctx.mem.read_bits(&i.src).at("src")?;
        let out: Vec<u32> = gather.iter().map(|&g| v[g]).collect();
        ctx.mem.write_bits(&i.dst, &out).at("dst")?;
    } else {
        let v = ctx.mem.read_f32(&i.src).at("src")?;
        let out: Vec<f32> = gather.iter().map(|&g| v[g]).collect();
        ctx.mem.write_f32(&i.dst, &out, ctx.rounding).at("dst")?;
    }
    let bytes = (total * i.dst.dtype.size()) as u64;
    ctx.stats.dma_bytes += bytes;
    ctx.stats.elements.dma += total as u64;
    ctx.stats.est_ns.dma += transfer_ns(ctx, &i.src, &i.dst, false, bytes);
    Ok(())
}

/// The descriptor-generation rules of a direct `dma_transpose` (`s`: the source's dims).
/// AWS: "The only valid dge_modes are unknown and hwdge" for a direct transpose; `hwdge` exists
/// on NeuronCore-v3+ and has the limits of [`crate::target::HwdgeTranspose`]. `unknown` lets the
/// compiler pick a lowering, so no HWDGE limit applies to it (docs/isa.md §5.30).
fn check_dge_mode(ctx: &Ctx, i: &DmaTranspose, s: &[usize]) -> OpResult<()> {
    match i.dge_mode {
        DgeMode::Unknown => Ok(()),
        DgeMode::None | DgeMode::Swdge => Err(ErrorKind::Invalid(format!(
            "dma_transpose takes dge_mode unknown or hwdge, not {}: AWS lowers a direct transpose only \
             through the hardware DGE (software DGE is the indirect transpose's)",
            i.dge_mode.name()
        )))
        .at("dge_mode"),
        DgeMode::Hwdge => {
            let Some(rule) = ctx.target.dma_transpose_hwdge else {
                return Err(ErrorKind::NotOnTarget {
                    opcode: "dma_transpose with dge_mode=hwdge (hardware DGE)",
                    target: ctx.target.label,
                })
                .at("dge_mode");
            };
            if !rule.first_dims.contains(&s[0]) {
                return Err(ErrorKind::Invalid(format!(
                    "dma_transpose with dge_mode=hwdge takes src.shape[0] in {:?}, got {} (src is {s:?})",
                    rule.first_dims, s[0]
                )))
                .at("src");
            }
            let last = s[s.len() - 1];
            if last > rule.max_last_dim {
                return Err(ErrorKind::FreeSizeLimit {
                    size: last,
                    limit: rule.max_last_dim,
                    what: "src.shape[-1] of a dma_transpose with dge_mode=hwdge",
                })
                .at("src");
            }
            if i.src.dtype.size() != rule.elem_bytes {
                return Err(ErrorKind::UnsupportedDType {
                    dtype: i.src.dtype.name(),
                    why: format!(
                        "dma_transpose with dge_mode=hwdge moves {}-byte elements only",
                        rule.elem_bytes
                    ),
                })
                .at("src");
            }
            Ok(())
        }
    }
}

/// `dst = Σ_k srcs[k]` element by element (partition-major order on every side), each source
/// decoded to fp32 and added in list order, each sum rounded to fp32 (the order is unpublished:
/// a choice), the result cast to dst's dtype. AWS supports only `reduce_op = add` and unit scales,
/// and at most 16 sources [`nki.isa` 2.32 `dma_compute`]. Cost: one transfer of every source's
/// bytes into dst.
pub fn dma_compute(ctx: &mut Ctx, i: &DmaCompute) -> OpResult<()> {
    use crate::program::{AluOp, DMA_COMPUTE_SRC_NAMES};
    if i.srcs.is_empty() || i.srcs.len() > DMA_COMPUTE_SRC_NAMES.len() {
        return Err(ErrorKind::Invalid(format!(
            "dma_compute takes 1 to {} sources, got {}",
            DMA_COMPUTE_SRC_NAMES.len(),
            i.srcs.len()
        )))
        .at("srcs");
    }
    if i.reduce_op != AluOp::Add {
        return Err(ErrorKind::Invalid(format!(
            "dma_compute reduces only with add, got {:?}",
            i.reduce_op
        )))
        .at("reduce_op");
    }
    if let Some(scales) = &i.scales
        && (scales.len() != i.srcs.len() || scales.iter().any(|&s| s != 1.0))
    {
        return Err(ErrorKind::Invalid(format!(
            "dma_compute takes one scale per source, each 1.0 (the only value AWS supports), got {scales:?}"
        )))
        .at("scales");
    }
    ctx.check_access("dst", &i.dst, Access::Write)?;
    let n = i.dst.num_elems();
    for (k, src) in i.srcs.iter().enumerate() {
        let name = DMA_COMPUTE_SRC_NAMES[k];
        ctx.check_access(name, src, Access::Read)?;
        if src.num_elems() != n {
            return Err(ErrorKind::ShapeMismatch(format!(
                "{name} has {} elements, dst {n}",
                src.num_elems()
            )))
            .at(name);
        }
    }
    let mut acc = ctx.mem.read_f32(&i.srcs[0]).at(DMA_COMPUTE_SRC_NAMES[0])?;
    for (k, src) in i.srcs.iter().enumerate().skip(1) {
        let v = ctx.mem.read_f32(src).at(DMA_COMPUTE_SRC_NAMES[k])?;
        for (a, b) in acc.iter_mut().zip(&v) {
            *a += *b;
        }
        ctx.mem.recycle_f32(v);
    }
    ctx.mem.write_f32(&i.dst, &acc, ctx.rounding).at("dst")?;
    ctx.mem.recycle_f32(acc);
    let bytes: u64 = i.srcs.iter().map(|s| (s.num_elems() * s.dtype.size()) as u64).sum();
    ctx.stats.dma_bytes += bytes;
    ctx.stats.elements.dma += n as u64;
    ctx.stats.flops += (n * (i.srcs.len() - 1)) as u64;
    ctx.stats.est_ns.dma += transfer_ns(ctx, &i.srcs[0], &i.dst, false, bytes);
    Ok(())
}
