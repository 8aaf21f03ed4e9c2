// Inline SVG charts and a graph layout, without libraries. Colours come
// from CSS classes so both themes apply.

const NS = 'http://www.w3.org/2000/svg';

export function el(tag, attrs = {}, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

export function fmtNum(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(1) + 'M';
  if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + 'k';
  return Number.isInteger(n) ? String(n) : n.toFixed(2);
}

// bars draws horizontal bars, one per {label, value}, largest first. The
// longest bar is the largest value, or floor when that is larger (counts
// use 1, so a single 0.5 is not drawn full width; costs in dollars use a
// tiny floor, since a few cents is a full bar).
export function bars(items, { unit = '', max = 12, format = (v) => fmtNum(v) + unit, floor = 1 } = {}) {
  const rows = [...items].sort((a, b) => b.value - a.value).slice(0, max);
  const rowH = 22, labelW = 130, width = 420;
  const top = Math.max(floor, ...rows.map((r) => r.value)) || 1;
  const svg = el('svg', { viewBox: `0 0 ${width} ${Math.max(rowH, rows.length * rowH)}`, class: 'chart bars', role: 'img' });
  if (!rows.length) {
    svg.append(el('text', { x: 4, y: 15, class: 'muted' }, 'no data yet'));
    return svg;
  }
  rows.forEach((r, i) => {
    const y = i * rowH;
    const w = Math.max(1, ((width - labelW - 70) * r.value) / top);
    const g = el('g');
    g.append(el('title', {}, `${r.label}: ${format(r.value)}`));
    g.append(el('text', { x: labelW - 6, y: y + 15, 'text-anchor': 'end', class: 'label' }, trunc(r.label, 18)));
    g.append(el('rect', { x: labelW, y: y + 4, width: w, height: rowH - 8, rx: 3, class: 'bar c' + (i % 6) }));
    g.append(el('text', { x: labelW + w + 6, y: y + 15, class: 'value' }, format(r.value)));
    svg.append(g);
  });
  return svg;
}

// line draws points [{t: ms, v}] as a line over time with a light area.
export function line(points, { unit = '' } = {}) {
  const width = 420, height = 140, padL = 64, padB = 18;
  const svg = el('svg', { viewBox: `0 0 ${width} ${height}`, class: 'chart line', role: 'img' });
  if (points.length < 2) {
    svg.append(el('text', { x: 4, y: 15, class: 'muted' }, 'collecting samples…'));
    return svg;
  }
  const t0 = points[0].t, t1 = points[points.length - 1].t;
  const vmax = Math.max(1, ...points.map((p) => p.v));
  const x = (t) => padL + ((width - padL - 4) * (t - t0)) / Math.max(1, t1 - t0);
  const y = (v) => height - padB - ((height - padB - 6) * v) / vmax;
  const d = points.map((p, i) => `${i ? 'L' : 'M'}${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(' ');
  svg.append(el('path', { d: `${d} L${x(t1)},${y(0)} L${x(t0)},${y(0)} Z`, class: 'area' }));
  svg.append(el('path', { d, class: 'stroke' }));
  svg.append(el('line', { x1: padL, x2: width, y1: y(0), y2: y(0), class: 'axis' }));
  svg.append(el('text', { x: padL - 4, y: y(vmax) + 4, 'text-anchor': 'end', class: 'label' }, fmtNum(vmax) + unit));
  svg.append(el('text', { x: padL - 4, y: y(0), 'text-anchor': 'end', class: 'label' }, '0'));
  svg.append(el('text', { x: width - 2, y: height - 3, 'text-anchor': 'end', class: 'label' }, 'now'));
  svg.append(el('text', { x: padL, y: height - 3, class: 'label' }, `−${Math.round((t1 - t0) / 1000)}s`));
  return svg;
}

// graph draws a group topology: nodes in layers by longest path from the
// entry nodes, edges as curves with their condition as a tooltip.
export function graph(topo) {
  const nodes = topo.nodes.map((n) => n.name);
  const edges = topo.edges.map((e) => ({ ...e }));
  if (topo.coordinator) {
    if (!nodes.includes(topo.coordinator)) nodes.push(topo.coordinator);
    for (const d of topo.delegates || []) {
      if (!nodes.includes(d)) nodes.push(d);
      edges.push({ from: topo.coordinator, to: d, when: 'delegate' });
    }
  }
  const layer = new Map(nodes.map((n) => [n, 0]));
  for (let pass = 0; pass < nodes.length; pass++) {
    let changed = false;
    for (const e of edges) {
      if (e.from === e.to) continue;
      const want = layer.get(e.from) + 1;
      if (want > layer.get(e.to) && want < nodes.length) { layer.set(e.to, want); changed = true; }
    }
    if (!changed) break;
  }
  const cols = [];
  for (const n of nodes) (cols[layer.get(n)] ||= []).push(n);
  const nodeW = 120, nodeH = 34, gapX = 60, gapY = 18;
  const height = Math.max(...cols.map((c) => c.length)) * (nodeH + gapY) + gapY;
  const width = cols.length * (nodeW + gapX) + gapX / 2;
  const pos = new Map();
  cols.forEach((c, i) => c.forEach((n, j) => {
    const off = (height - c.length * (nodeH + gapY) + gapY) / 2;
    pos.set(n, { x: gapX / 2 + i * (nodeW + gapX), y: off + j * (nodeH + gapY) });
  }));
  const svg = el('svg', { viewBox: `0 0 ${width} ${height}`, width, class: 'chart graph', role: 'img' });
  const defs = el('defs');
  const marker = el('marker', { id: 'arrow-' + topo.name.replace(/\W/g, '_'), viewBox: '0 0 10 10', refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' });
  marker.append(el('path', { d: 'M0,0 L10,5 L0,10 z', class: 'arrowhead' }));
  defs.append(marker);
  svg.append(defs);
  for (const e of edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const x1 = a.x + nodeW, y1 = a.y + nodeH / 2, x2 = b.x, y2 = b.y + nodeH / 2;
    const mx = (x1 + x2) / 2;
    const g = el('g', { class: 'edge' + (e.fan_out ? ' fanout' : '') });
    const label = [e.when, e.fan_out && 'fan-out: ' + e.fan_out].filter(Boolean).join('; ');
    if (label) g.append(el('title', {}, label));
    g.append(el('path', { d: `M${x1},${y1} C${mx},${y1} ${mx},${y2} ${x2},${y2}`, 'marker-end': `url(#${marker.id})` }));
    if (e.when || e.fan_out) g.append(el('text', { x: mx, y: (y1 + y2) / 2 - 4, 'text-anchor': 'middle', class: 'edge-label' }, e.fan_out ? '⋔' : '?'));
    svg.append(g);
  }
  const entry = new Set(topo.entry || []), terminal = new Set(topo.terminal || []);
  for (const n of nodes) {
    const p = pos.get(n);
    const def = topo.nodes.find((x) => x.name === n);
    const cls = ['node', entry.has(n) && 'entry', terminal.has(n) && 'terminal'].filter(Boolean).join(' ');
    const g = el('g', { class: cls, 'data-node': n });
    g.append(el('title', {}, `${n}${def && def.agent !== n ? ' (agent ' + def.agent + ')' : ''}`));
    g.append(el('rect', { x: p.x, y: p.y, width: nodeW, height: nodeH, rx: 8 }));
    g.append(el('text', { x: p.x + nodeW / 2, y: p.y + nodeH / 2 + 4, 'text-anchor': 'middle' }, trunc(n, 15)));
    svg.append(g);
  }
  return svg;
}

function trunc(s, n) { s = String(s); return s.length > n ? s.slice(0, n - 1) + '…' : s; }
