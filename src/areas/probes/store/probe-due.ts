import type { Db } from '../../../store/db.js';
import { dueInMs } from '../../../store/next-due.js';

/** The earliest slot of an enabled monitor (the claim moves it to the next slot). */
const MONITORS = `SELECT EXTRACT(EPOCH FROM min(next_due_at) - clock_timestamp()) * 1000 AS ms FROM monitors WHERE enabled`;
/** The earliest occurrence of an enabled account-test plan. */
const ACCOUNT_TESTS = `SELECT EXTRACT(EPOCH FROM min(next_run_at) - clock_timestamp()) * 1000 AS ms FROM account_test_plans WHERE enabled`;

/** When the runners' work is next due, on the database clock (`store/next-due.ts`): ms from now, negative when due, null when none. */
export class ProbeDue {
  constructor(private readonly db: Db) {}

  monitorsInMs(): Promise<number | null> {
    return dueInMs(this.db, MONITORS);
  }

  accountTestsInMs(): Promise<number | null> {
    return dueInMs(this.db, ACCOUNT_TESTS);
  }
}
