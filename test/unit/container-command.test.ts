import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  CommandError,
  containerArgv,
  containerCwd,
  containerEnv,
  CONTAINER_DEFAULT_PATH,
  expandVars,
  parseGroup,
  parsePasswd,
  resolveUser,
} from '../../src/agent/pods/runtime/command.js';

/** Kubernetes' rules for the process a container runs, from its image config and its spec. */

const argv = (r: { command: string[]; args: string[] }): string[] => [...r.command, ...r.args];

describe('command and args against Entrypoint and Cmd', () => {
  const image = { entrypoint: ['/docker-entrypoint.sh'], cmd: ['nginx', '-g', 'daemon off;'] };

  it('neither set: Entrypoint then Cmd', () => {
    assert.deepEqual(argv(containerArgv(image, undefined, undefined)), ['/docker-entrypoint.sh', 'nginx', '-g', 'daemon off;']);
    assert.deepEqual(argv(containerArgv(image, [], [])), ['/docker-entrypoint.sh', 'nginx', '-g', 'daemon off;']);
  });

  it('command only: the image Cmd is dropped too', () => {
    assert.deepEqual(argv(containerArgv(image, ['sleep'], undefined)), ['sleep']);
  });

  it('args only: Entrypoint then args', () => {
    assert.deepEqual(argv(containerArgv(image, undefined, ['-v'])), ['/docker-entrypoint.sh', '-v']);
  });

  it('both: command then args', () => {
    assert.deepEqual(argv(containerArgv(image, ['sh'], ['-c', 'true'])), ['sh', '-c', 'true']);
  });

  it('an Entrypoint of [""] is no entrypoint; Cmd alone runs', () => {
    assert.deepEqual(argv(containerArgv({ entrypoint: [''], cmd: ['sh'] }, undefined, undefined)), ['sh']);
    assert.deepEqual(argv(containerArgv({ cmd: ['/bin/sh', '-c', 'x'] }, undefined, undefined)), ['/bin/sh', '-c', 'x']);
  });

  it('nothing at all is an error that says so', () => {
    assert.throws(() => containerArgv({}, undefined, undefined), (e: unknown) => e instanceof CommandError && /no command specified/.test(e.message));
  });

  it('expands $(VAR) from the container env; unknown stays; $$ escapes', () => {
    const env = { NAME: 'world', EMPTY: '' };
    assert.equal(expandVars('hello $(NAME)', env), 'hello world');
    assert.equal(expandVars('$(MISSING) $(EMPTY)x', env), '$(MISSING) x');
    assert.equal(expandVars('$$(NAME) $$ $x $', env), '$(NAME) $ $x $');
    assert.equal(expandVars('$(NAME', env), '$(NAME');
    assert.deepEqual(argv(containerArgv(image, ['echo'], ['$(NAME)'], env)), ['echo', 'world']);
  });
});

describe('environment and working directory', () => {
  it('PATH default, HOSTNAME, then image Env, then the pod env; later wins', () => {
    const env = containerEnv(['PATH=/opt/bin:/bin', 'LANG=C', 'BAD', 'EQ=a=b'], 'web-1', { LANG: 'en', HOSTNAME: 'mine' });
    assert.deepEqual(env, { PATH: '/opt/bin:/bin', HOSTNAME: 'mine', LANG: 'en', EQ: 'a=b' });
    assert.equal(containerEnv(undefined, 'web-1', {}).PATH, CONTAINER_DEFAULT_PATH);
    assert.equal(containerEnv(undefined, 'web-1', {}).HOSTNAME, 'web-1');
  });

  it('workingDir: the container, else the image, else /', () => {
    assert.equal(containerCwd('/app', { workingDir: '/srv' }), '/app');
    assert.equal(containerCwd(undefined, { workingDir: '/srv' }), '/srv');
    assert.equal(containerCwd(undefined, {}), '/');
    assert.throws(() => containerCwd('rel', {}), /not an absolute path/);
  });
});

describe('users', () => {
  const passwd = parsePasswd('root:x:0:0:root:/root:/bin/sh\n# comment\nnginx:x:101:101:nginx:/nonexistent:/bin/false\nbroken\napp:x:1000:1000::/home/app:/bin/sh\n');
  const group = parseGroup('root:x:0:\nnginx:x:101:\napp:x:1000:\nwheel:x:10:app,other\naudio:x:29:app\n');

  it('parses passwd and group', () => {
    assert.deepEqual(passwd.map((p) => p.name), ['root', 'nginx', 'app']);
    assert.deepEqual(group.find((g) => g.name === 'wheel')?.members, ['app', 'other']);
  });

  it('an image without User runs as root', () => {
    assert.deepEqual(resolveUser({ passwd, group }), { uid: 0, gid: 0 });
  });

  it('a user name from the image is looked up, with its groups', () => {
    assert.deepEqual(resolveUser({ imageUser: 'app', passwd, group }), { uid: 1000, gid: 1000, additionalGids: [10, 29] });
    assert.deepEqual(resolveUser({ imageUser: 'nginx:app', passwd, group }), { uid: 101, gid: 1000 });
    assert.deepEqual(resolveUser({ imageUser: '101:29', passwd, group }), { uid: 101, gid: 29 });
  });

  it('a uid alone takes its group from passwd, or 0', () => {
    assert.deepEqual(resolveUser({ imageUser: '1000', passwd, group }), { uid: 1000, gid: 1000, additionalGids: [10, 29] });
    assert.deepEqual(resolveUser({ imageUser: '4242', passwd, group }), { uid: 4242, gid: 0 });
  });

  it('runAsUser replaces the image user and its group; runAsGroup replaces the group', () => {
    assert.deepEqual(resolveUser({ imageUser: 'nginx:app', runAsUser: 2000, passwd, group }), { uid: 2000, gid: 0 });
    assert.deepEqual(resolveUser({ imageUser: 'nginx', runAsGroup: 3000, passwd, group }), { uid: 101, gid: 3000 });
    assert.deepEqual(resolveUser({ runAsUser: 1000, runAsGroup: 5, supplementalGroups: [7, 5], passwd, group }), {
      uid: 1000,
      gid: 5,
      additionalGids: [10, 29, 7],
    });
  });

  it('unknown names are errors', () => {
    assert.throws(() => resolveUser({ imageUser: 'ghost', passwd, group }), /unable to find user ghost/);
    assert.throws(() => resolveUser({ imageUser: 'app:ghosts', passwd, group }), /unable to find group ghosts/);
    assert.throws(() => resolveUser({ imageUser: 'app' }), /unable to find user app/);
  });

  it('runAsNonRoot refuses root and a name it cannot check', () => {
    assert.throws(
      () => resolveUser({ runAsNonRoot: true, passwd, group }),
      (e: unknown) => e instanceof CommandError && e.reason === 'CreateContainerConfigError' && /will run as root/.test(e.message),
    );
    assert.throws(() => resolveUser({ imageUser: 'app', runAsNonRoot: true, passwd, group }), /non-numeric user \(app\)/);
    assert.deepEqual(resolveUser({ imageUser: 'app', runAsUser: 1000, runAsNonRoot: true, passwd, group }).uid, 1000);
    assert.throws(() => resolveUser({ imageUser: 'app', runAsUser: 0, runAsNonRoot: true, passwd, group }), /will run as root/);
  });
});
