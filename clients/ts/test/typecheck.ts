// Compiled (not run) by types.test.js with tsc --strict: the declarations
// of index.d.ts, used as the docs use them, must type-check.
import { ApprovalRequiredError, Client, RegistryError, SvcError, type AgentResult, type AgentSchema, type GatherItem, type GatherSummary, type Problem, type RunEvent, type RunResult, type RunState, type RunStatus, type RuntimeEvent, type TaskSpec, type Topology, type WaitRequest } from '../src/index.js';
const svc = new Client('http://127.0.0.1:8420', { token: 'x', timeoutMs: 1000 });
async function main() {
  const r: AgentResult = await svc.run('echo', { input: { text: 'hi' } }, { signal: AbortSignal.timeout(10) });
  const rs: AgentResult[] = await svc.gather('echo', [{ input: 1 }], { maxConcurrency: 2 });
  const h = await svc.submit('panel', { input: 'x' }, { kind: 'group', idempotencyKey: 'k' });
  for await (const ev of h.events({ lastEventId: 2 })) { const e: RunEvent = ev; console.log(e.seq); }
  for await (const ev of svc.streamEvents({ eventTypes: ['agent_completed'], agent: 'echo' })) { const e: RuntimeEvent = ev; console.log(e.payload); break; }
  const st = await h.status(); console.log(st.progress?.completed, r.metadata.trace_id, rs.length, st.trace_id?.length);
  const page = await svc.listRuns({ state: 'completed', limit: 1 }); console.log(page.next_cursor, page.runs?.[0]?.trace_id);
  const cost: number = (await svc.usage('model')).groups?.['test:echo']?.cost_usd ?? 0; console.log(cost);
  console.log((await svc.usage('agent')).total.tokens_used, (await svc.runtimeStats()).header.events, (await svc.listTools())[0]?.name);
  try { await svc.run('nope', { input: 1 }); } catch (err) { if (err instanceof RegistryError) { const e: SvcError = err; console.log(e.status, e.kind, e.requestId, e.problem?.error); } }
  await h.cancel(); await h.result();
  // The generated wire types: a task with metadata, a group's result told
  // apart by its keys, an event's payload by its event_type, a problem's kind.
  const task: TaskSpec = { id: 't1', input: [1, 'x', null], request_id: 'r', metadata: { k: 'v' } };
  const gr: RunResult = await svc.runGroup('panel', task);
  if ('outputs' in gr) { console.log(gr.metadata.group_name, gr.outputs['a']?.metadata.tokens_used); } else { console.log(gr.agent_name, gr.error?.message); }
  for await (const ev of svc.streamEvents()) { if (ev.event_type === 'agent_completed') { const t: number = ev.payload.tokens_used; console.log(t); } break; }
  const p: Problem | null = null as Problem | null; const kind: string | undefined = p?.error; console.log(kind, p?.status, p?.request_id);
  // The streamed gather from a generator, its summary as the return value;
  // the schema, topology and health calls; reconnect options.
  async function* tasks(): AsyncGenerator<TaskSpec> { yield { input: 1 }; }
  const it = svc.gatherStream('echo', tasks(), { maxConcurrency: 10, signal: AbortSignal.timeout(1000) });
  for (let n = await it.next(); ; n = await it.next()) {
    if (n.done) { const sum: GatherSummary = n.value; console.log(sum.task_count, sum.error?.type); break; }
    const item: GatherItem = n.value; console.log(item.index, item.result.success);
  }
  for await (const { index, result } of svc.gatherStream('echo', [{ input: 'a' }])) console.log(index, result.output);
  const sch: AgentSchema = await svc.agentSchema('echo'); console.log(sch.name, sch.input);
  const top: Topology = await svc.groupTopology('panel'); console.log(top.mermaid, top.edges?.[0]?.when);
  console.log((await svc.health()).status);
  // Human in the loop: a waiting run's requests, answered by approval or
  // with any JSON; a decision is an approval or an answer, not both.
  const waiting: RunState = 'waiting';
  const ws: RunStatus = await h.status();
  if (ws.state === waiting) {
    const w: WaitRequest | undefined = ws.waiting?.[0];
    if (w?.kind === 'approval') { const st: RunStatus = await h.resume({ requestId: w.id, approve: false, reason: 'no', timeoutMs: 1000 }); console.log(st.state, w.tool, w.arguments); }
    if (w) await svc.resumeRun(h.runId, { requestId: w.id, answer: { pick: [1, null] } });
    // @ts-expect-error an approval and an answer at once
    if (w) await h.resume({ requestId: w.id, approve: true, answer: 'x' });
  }
  for await (const ev of h.events()) { if (ev.type === 'run_waiting') console.log(ev.request?.id, ev.request?.question); }
  try { await svc.run('gated', { input: 1 }); } catch (err) { if (err instanceof ApprovalRequiredError) console.log(err.status, err.detail); }
  for await (const ev of svc.streamEvents({ reconnect: true, idleTimeoutMs: 30_000, onReconnect: ({ attempt, error }) => console.log(attempt, error) })) { console.log(ev.event_type); break; }
}
void main;
