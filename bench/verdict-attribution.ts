/**
 * Why a simulated node that never stopped renewing was judged suspect (bench/scale.ts's false
 * verdicts): from the simulator's own record of that node's renewals, was it really silent on the
 * wire for longer than the controller's suspect threshold, and if so, whose delay made the gap?
 *
 * A simulated node sends its next renewal a renew interval after the previous one was answered
 * (as the agent does), so the gap between two sends is: the previous renewal's answer time as the
 * node saw it (the server's queue, handler and commit, the answer's way back, the simulator
 * reading it) + the renew interval + how late the simulator's timer fired. Only the last part is
 * the simulator's alone; a gap the simulator's lateness made longer than the threshold is a
 * silence no server could have seen through. A verdict with no such gap is the server's: the node
 * renewed often enough on the wire, and the controller's view lost it.
 */

/** One renewal as the simulator saw it, epoch milliseconds. */
export interface RenewalRecord {
  /** When its timer was due (the previous answer + the renew interval, or the start phase). */
  dueAt: number;
  /** When it was sent (its timer fired). */
  sentAt: number;
  /** When its answer came back; absent if it had none (yet). */
  answeredAt?: number;
  /**
   * It did not go out at once over an idle kept-alive connection: it opened a new one (a TLS
   * handshake first) or, with connections shared, waited in the simulator's pool for a free one
   * (Node's `request.reusedSocket` is false in both cases).
   */
  waitedForConnection?: true;
}

export type VerdictCause =
  /** The node was silent on the wire past the threshold only because the simulator's timer fired late. */
  | 'simulator late'
  /** Silent on the wire past the threshold because its previous renewal's answer took that long. */
  | 'answer late'
  /** Never silent on the wire for the threshold: the controller's view was behind the wire. */
  | 'server view';

export interface VerdictAttribution {
  cause: VerdictCause;
  /** The longest silence on the wire before the verdict (ms): between two sends, or from the last send to the verdict. */
  wireGapMs: number;
  /** When that gap began (the send before it, epoch ms). */
  gapFrom?: number;
  /** Of that gap: the previous renewal's answer time as the node saw it, and the next one's timer lateness (ms). */
  answerMs?: number;
  simulatorLateMs?: number;
  /** The renewal that opened the gap waited for a connection (see RenewalRecord). */
  waitedForConnection?: true;
}

/** Looked back this far before the verdict for the gap (a suspect verdict follows a gap of seconds). */
const LOOK_BACK_MS = 10_000;

/**
 * `verdictAt`: when the verdict was seen (after the controller made it); `suspectAfterMs`: the
 * controller's suspect threshold (grace / 2). Records in any order.
 */
export function attributeVerdict(verdictAt: number, records: readonly RenewalRecord[], suspectAfterMs: number): VerdictAttribution {
  const sends = records.filter((r) => r.sentAt <= verdictAt && r.sentAt >= verdictAt - LOOK_BACK_MS).sort((a, b) => a.sentAt - b.sentAt);
  let worst: VerdictAttribution = { cause: 'server view', wireGapMs: 0 };
  for (let i = 0; i < sends.length; i++) {
    const previous = sends[i]!;
    const next = sends[i + 1];
    const gapMs = (next?.sentAt ?? verdictAt) - previous.sentAt;
    if (gapMs <= worst.wireGapMs) continue;
    const answerMs = previous.answeredAt !== undefined && (!next || previous.answeredAt <= next.sentAt) ? previous.answeredAt - previous.sentAt : undefined;
    const simulatorLateMs = next ? Math.max(0, next.sentAt - next.dueAt) : undefined;
    let cause: VerdictCause = 'server view';
    if (gapMs > suspectAfterMs) cause = simulatorLateMs !== undefined && gapMs - simulatorLateMs <= suspectAfterMs ? 'simulator late' : 'answer late';
    worst = {
      cause,
      wireGapMs: gapMs,
      gapFrom: previous.sentAt,
      ...(answerMs !== undefined ? { answerMs } : {}),
      ...(simulatorLateMs !== undefined ? { simulatorLateMs } : {}),
      ...(previous.waitedForConnection ? { waitedForConnection: true as const } : {}),
    };
  }
  return worst;
}

/** Counts by cause, for the bench's line. */
export function countCauses(attributions: readonly VerdictAttribution[]): Record<VerdictCause, number> {
  const counts: Record<VerdictCause, number> = { 'simulator late': 0, 'answer late': 0, 'server view': 0 };
  for (const a of attributions) counts[a.cause]++;
  return counts;
}
