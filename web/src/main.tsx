import { render } from 'preact';
import { useEffect, useState } from 'preact/hooks';
import { api, signIn, signOut, whenSignedOut, ApiError } from './api';
import { Overview } from './pages/overview';
import { Timeline } from './pages/timeline';
import { closeLive, isLive, onLiveState, openLive } from './live';
import { Jobs, JobPage } from './pages/jobs';
import { Accounts } from './pages/accounts';
import { Usage } from './pages/usage';
import { Billing } from './pages/billing';
import { Ops } from './pages/ops';
import { Images, Scheduler } from './pages/more';
import { AccountTests, Backups, Monitors } from './pages/probes';
import { Doctor } from './pages/doctor';
import './style.css';

const PAGES: { path: string; label: string }[] = [
  { path: '', label: 'Overview' },
  { path: 'jobs', label: 'Jobs' },
  { path: 'timeline', label: 'Timeline' },
  { path: 'accounts', label: 'Accounts & proxies' },
  { path: 'usage', label: 'Usage' },
  { path: 'billing', label: 'Billing & notifications' },
  { path: 'ops', label: 'Alerts' },
  { path: 'images', label: 'Image batches' },
  { path: 'scheduler', label: 'Scheduler' },
  { path: 'monitors', label: 'Monitors' },
  { path: 'account-tests', label: 'Account tests' },
  { path: 'backups', label: 'Backups' },
  { path: 'doctor', label: 'Doctor' },
];

function useHash(): string {
  const [h, setH] = useState(location.hash.replace(/^#\/?/, ''));
  useEffect(() => {
    const f = () => setH(location.hash.replace(/^#\/?/, ''));
    addEventListener('hashchange', f);
    return () => removeEventListener('hashchange', f);
  }, []);
  return h;
}

function SignIn({ onDone }: { onDone: () => void }) {
  const [token, setToken] = useState('');
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setError(null);
    try {
      await signIn(token);
      setToken('');
      onDone();
    } catch (err) {
      setError(err instanceof ApiError && err.status === 401 ? 'Sign-in failed: the admin token is wrong.' : `Sign-in failed: ${(err as Error).message}`);
    } finally {
      setBusy(false);
    }
  };
  return (
    <main class="signin">
      <h1>relay-jobs console</h1>
      <form onSubmit={submit}>
        <label for="token">Admin token</label>
        <input id="token" type="password" autocomplete="current-password" value={token} onInput={(e) => setToken((e.target as HTMLInputElement).value)} required autofocus />
        <button type="submit" disabled={busy || !token}>
          Sign in
        </button>
        {error && (
          <p class="error" role="alert">
            {error}
          </p>
        )}
      </form>
    </main>
  );
}

function Page({ route }: { route: string }) {
  const [top, arg] = route.split('/');
  if (top === 'jobs' && arg) return <JobPage name={decodeURIComponent(arg)} />;
  switch (top) {
    case 'jobs':
      return <Jobs />;
    case 'timeline':
      return <Timeline />;
    case 'accounts':
      return <Accounts />;
    case 'usage':
      return <Usage />;
    case 'billing':
      return <Billing />;
    case 'ops':
      return <Ops />;
    case 'images':
      return <Images />;
    case 'scheduler':
      return <Scheduler />;
    case 'monitors':
      return <Monitors />;
    case 'account-tests':
      return <AccountTests />;
    case 'backups':
      return <Backups />;
    case 'doctor':
      return <Doctor />;
    default:
      return <Overview />;
  }
}

/** Whether the push stream is up; while it is down, pages fall back to polling and say so here. */
function LiveState() {
  const [up, setUp] = useState(isLive());
  useEffect(() => onLiveState(setUp), []);
  return (
    <span class={`live muted`} role="status" title={up ? 'changes arrive by server push' : 'the push stream is down: pages poll until it is back'}>
      {up ? '● live' : '○ reconnecting'}
    </span>
  );
}

function App() {
  const [signedIn, setSignedIn] = useState<boolean | null>(null);
  const route = useHash();
  useEffect(() => {
    if (signedIn) openLive();
    else closeLive();
  }, [signedIn]);
  useEffect(() => {
    whenSignedOut(() => setSignedIn(false));
    api('/sessions/current').then(
      () => setSignedIn(true),
      () => setSignedIn(false),
    );
  }, []);
  if (signedIn === null)
    return (
      <p class="muted" role="status">
        Loading…
      </p>
    );
  if (!signedIn) return <SignIn onDone={() => setSignedIn(true)} />;
  const top = route.split('/')[0];
  return (
    <div class="shell">
      <header>
        <strong>relay-jobs</strong>
        <nav aria-label="Pages">
          {PAGES.map((p) => (
            <a key={p.path} href={`#/${p.path}`} aria-current={top === p.path ? 'page' : undefined}>
              {p.label}
            </a>
          ))}
        </nav>
        <LiveState />
        <button class="quiet" onClick={() => (closeLive(), void signOut().finally(() => setSignedIn(false)))}>
          Sign out
        </button>
      </header>
      <main>
        <Page route={route} />
      </main>
    </div>
  );
}

render(<App />, document.getElementById('app')!);
