/* cmd_jobs.c — tpusim jobs: the job runner of a TPU platform. `jobs create` resolves the TPU's name, records
 * the job in the registry's database and starts a supervisor (its own session and process group, so it
 * outlives the command that started it): the supervisor runs the command with TPU_NAME, TPU_GRPC_URL and the
 * data and model directories in its environment, stores every line it prints as the job's log, and when it
 * ends records the exit code and copies what it left in its model directory to the job's artifacts folder.
 * Records and logs live in SQLite: they survive a restart of the tool. */
#include "cli.h"
#include "net/net.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void jobs_usage(FILE *f)
{
    fprintf(f, "usage: tpusim jobs create --tpu NAME --command \"python main.py\" [--workdir DIR] [--data DIR]\n"
               "                          [--model-dir DIR] [--wait]\n"
               "       tpusim jobs list [--json]\n"
               "       tpusim jobs logs ID [--follow]\n"
               "       tpusim jobs stop ID\n"
               "       tpusim jobs artifacts ID\n\n"
               "create runs the command (sh -c) in DIR (default: here) with TPU_NAME=NAME and TPU_GRPC_URL (resolved\n"
               "now), TPUSIM_DATA_DIR/DATA_DIR=--data and TPUSIM_MODEL_DIR/MODEL_DIR=--model-dir (default: the job's\n"
               "own folder under $TPUSIM_HOME/jobs/ID/model), and prints the job's ID; --wait follows its log and\n"
               "exits with its exit code. When the job ends, what it left in the model directory is copied to\n"
               "$TPUSIM_HOME/jobs/ID/artifacts (jobs artifacts ID lists it). Jobs and logs are kept in\n"
               "$TPUSIM_HOME/registry.db.\n");
}

static int jobs_fail(tn_err *e, const char *what)
{
    fprintf(stderr, "tpusim jobs %s: %s\n", what, tn_err_msg(e));
    tn_err_clear(e);
    return 1;
}

static int jobs_terminal(const char *state)
{
    return !strcmp(state, "SUCCEEDED") || !strcmp(state, "FAILED") || !strcmp(state, "STOPPED") || !strcmp(state, "LOST");
}

/* A RUNNING job whose supervisor is gone (the machine rebooted, it was killed) is LOST. */
static void jobs_check_alive(tn_registry *r, tn_job *j)
{
    if (jobs_terminal(j->state) || j->pid <= 0) return;
    if (kill(j->pid, 0) == 0 || errno == EPERM) return;
    tn_err e = {0};
    tn_job cur;
    if (tn_job_get(r, j->id, &cur, &e)) return tn_err_clear(&e);
    if (!jobs_terminal(cur.state)) {   /* not finished in the meantime */
        snprintf(cur.state, sizeof cur.state, "LOST");
        free(cur.message);
        cur.message = strdup("its supervisor is gone (killed, or the machine restarted)");
        cur.ended = tn_wall();
        tn_job_update(r, &cur, &e);
    }
    snprintf(j->state, sizeof j->state, "%s", cur.state);
    tn_job_clear(&cur);
    tn_err_clear(&e);
}

/* ---- copying the model directory ---- */

static int jobs_copy_file(const char *src, const char *dst)
{
    int in = open(src, O_RDONLY), out = in < 0 ? -1 : open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    char buf[65536];
    ssize_t n = 0;
    while (out >= 0 && (n = read(in, buf, sizeof buf)) > 0)
        if (write(out, buf, (size_t)n) != n) n = -1;
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    return in < 0 || out < 0 || n < 0 ? -1 : 0;
}

/* Regular files and folders under src into dst (no links), at most *budget files, 16 deep. */
static int jobs_copy_tree(const char *src, const char *dst, int depth, int *budget)
{
    if (depth > 16 || (mkdir(dst, 0755) && errno != EEXIST)) return -1;
    DIR *d = opendir(src);
    if (!d) return -1;
    int rc = 0;
    struct dirent *ent;
    while ((ent = readdir(d)) && *budget > 0) {
        if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
        char s[PATH_MAX], t[PATH_MAX];
        snprintf(s, sizeof s, "%s/%s", src, ent->d_name);
        snprintf(t, sizeof t, "%s/%s", dst, ent->d_name);
        struct stat st;
        if (lstat(s, &st)) continue;
        if (S_ISDIR(st.st_mode)) rc |= jobs_copy_tree(s, t, depth + 1, budget);
        else if (S_ISREG(st.st_mode)) rc |= jobs_copy_file(s, t), (*budget)--;
    }
    closedir(d);
    return rc;
}

static void jobs_list_tree(const char *root, const char *rel, int depth, int *budget, int64_t *total)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s%s%s", root, *rel ? "/" : "", rel);
    DIR *d = depth > 16 ? NULL : opendir(path);
    if (!d) return;
    struct dirent *ent;
    while ((ent = readdir(d)) && *budget > 0) {
        if (!strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..")) continue;
        char r[PATH_MAX], full[PATH_MAX];
        snprintf(r, sizeof r, "%s%s%s", rel, *rel ? "/" : "", ent->d_name);
        snprintf(full, sizeof full, "%s/%s", root, r);
        struct stat st;
        if (lstat(full, &st)) continue;
        if (S_ISDIR(st.st_mode)) jobs_list_tree(root, r, depth + 1, budget, total);
        else if (S_ISREG(st.st_mode)) {
            printf("%12lld  %s\n", (long long)st.st_size, r);
            *total += st.st_size;
            (*budget)--;
        }
    }
    closedir(d);
}

/* ---- the supervisor ---- */

static void jobs_exec_command(const tn_job *j, int out, int err)
{
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    dup2(out, 1);
    dup2(err, 2);
    char id[32];
    snprintf(id, sizeof id, "%lld", (long long)j->id);
    setenv("TPU_NAME", j->tpu, 1);
    setenv("TPU_GRPC_URL", j->url, 1);
    setenv("TPUSIM_JOB_ID", id, 1);
    setenv("TPUSIM_MODEL_DIR", j->model_dir, 1);
    setenv("MODEL_DIR", j->model_dir, 1);
    if (j->data_dir && *j->data_dir) setenv("TPUSIM_DATA_DIR", j->data_dir, 1), setenv("DATA_DIR", j->data_dir, 1);
    if (chdir(j->workdir)) {
        fprintf(stderr, "tpusim jobs: --workdir %s: %s\n", j->workdir, strerror(errno));
        _exit(126);
    }
    execl("/bin/sh", "sh", "-c", j->command, (char *)NULL);
    fprintf(stderr, "tpusim jobs: /bin/sh: %s\n", strerror(errno));
    _exit(127);
}

/* Reads the command's output line by line into the log until both pipes close. */
static void jobs_pump(tn_registry *r, int64_t id, int out, int err)
{
    struct pollfd fds[2] = {{out, POLLIN, 0}, {err, POLLIN, 0}};
    char buf[2][8192];
    size_t have[2] = {0, 0};
    int open_n = 2;
    while (open_n > 0) {
        if (poll(fds, 2, 1000) < 0 && errno != EINTR) break;
        for (int k = 0; k < 2; k++) {
            if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
            ssize_t n = read(fds[k].fd, buf[k] + have[k], sizeof buf[k] - have[k]);
            if (n <= 0) {
                if (have[k]) tn_job_log_append(r, id, k ? "stderr" : "stdout", buf[k], have[k], NULL);
                have[k] = 0;
                close(fds[k].fd);
                fds[k].fd = -1;
                open_n--;
                continue;
            }
            have[k] += (size_t)n;
            char *start = buf[k], *nl;
            while ((nl = memchr(start, '\n', have[k] - (size_t)(start - buf[k])))) {
                tn_job_log_append(r, id, k ? "stderr" : "stdout", start, (size_t)(nl - start), NULL);
                start = nl + 1;
            }
            size_t rest = have[k] - (size_t)(start - buf[k]);
            if (rest == sizeof buf[k]) {   /* a line longer than the buffer: stored in pieces */
                tn_job_log_append(r, id, k ? "stderr" : "stdout", buf[k], rest, NULL);
                rest = 0;
            }
            memmove(buf[k], start, rest);
            have[k] = rest;
        }
    }
}

static void jobs_supervise(const char *home, int64_t id)
{
    tn_registry *r = NULL;
    tn_job j;
    tn_err e = {0};
    if (tn_registry_open(home, &r, &e) || tn_job_get(r, id, &j, &e)) _exit(1);
    int po[2], pe[2];
    if (pipe(po) || pipe(pe)) _exit(1);
    pid_t child = fork();
    if (child == 0) {
        close(po[0]), close(pe[0]);
        jobs_exec_command(&j, po[1], pe[1]);
    }
    close(po[1]), close(pe[1]);
    j.pid = (int)getpid();
    j.started = tn_wall();
    snprintf(j.state, sizeof j.state, "RUNNING");
    tn_job_update(r, &j, &e);
    jobs_pump(r, id, po[0], pe[0]);
    int status = 0;
    while (child > 0 && waitpid(child, &status, 0) < 0 && errno == EINTR) {}
    tn_job cur;
    int stopping = !tn_job_get(r, id, &cur, &e) && !strcmp(cur.state, "STOPPING");
    if (!stopping) memset(&cur, 0, sizeof cur);
    tn_job_clear(&cur);
    int budget = 10000;
    int copy_rc = jobs_copy_tree(j.model_dir, j.artifacts_dir, 0, &budget);
    j.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    snprintf(j.state, sizeof j.state, "%s", stopping ? "STOPPED" : j.exit_code == 0 ? "SUCCEEDED" : "FAILED");
    free(j.message);
    j.message = strdup(copy_rc ? "some artifacts could not be copied" : "");
    j.ended = tn_wall();
    tn_job_update(r, &j, &e);
    tn_job_clear(&j);
    tn_registry_close(r);
    _exit(0);
}

/* ---- subcommands ---- */

static char *jobs_abs(const char *path)
{
    char buf[PATH_MAX];
    if (!realpath(path, buf)) return NULL;
    return strdup(buf);
}

static int jobs_follow(tn_registry *r, int64_t id, int follow);

/* Fills the job's record from the options; the directories must exist (the model dir is made). */
static int jobs_prepare(tn_registry *r, tn_job *j, const char *workdir, const char *data, const char *model, tn_err *e)
{
    j->workdir = jobs_abs(workdir ? workdir : ".");
    if (!j->workdir) return tn_fail(e, TN_INVALID_ARGUMENT, "--workdir %s: %s", workdir ? workdir : ".", strerror(errno));
    if (data && !(j->data_dir = jobs_abs(data))) return tn_fail(e, TN_INVALID_ARGUMENT, "--data %s: %s", data, strerror(errno));
    snprintf(j->state, sizeof j->state, "PENDING");
    j->created = tn_wall();
    if (tn_job_insert(r, j, e)) return e->code;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/jobs/%lld/artifacts", tn_registry_home(r), (long long)j->id);
    j->artifacts_dir = strdup(dir);
    snprintf(dir, sizeof dir, "%s/jobs/%lld/model", tn_registry_home(r), (long long)j->id);
    const char *md = model ? model : dir;
    if (tpu_mkdirs(NULL, j->artifacts_dir, 0755) || tpu_mkdirs(NULL, md, 0755))
        return tn_fail(e, TN_INVALID_ARGUMENT, "--model-dir %s: cannot create it: %s", md, strerror(errno));
    j->model_dir = jobs_abs(md);
    return tn_job_update(r, j, e);
}

static int jobs_create(int argc, char **argv)
{
    const char *tpu = NULL, *cmd = NULL, *workdir = NULL, *data = NULL, *model = NULL, *v;
    int wait = 0;
    for (int i = 2; i < argc; i++) {
        if ((v = cli_opt_value(argc, argv, &i, "--tpu"))) tpu = v;
        else if ((v = cli_opt_value(argc, argv, &i, "--command"))) cmd = v;
        else if ((v = cli_opt_value(argc, argv, &i, "--workdir"))) workdir = v;
        else if ((v = cli_opt_value(argc, argv, &i, "--data"))) data = v;
        else if ((v = cli_opt_value(argc, argv, &i, "--model-dir"))) model = v;
        else if (!strcmp(argv[i], "--wait")) wait = 1;
        else return fprintf(stderr, "tpusim jobs create: unexpected '%s' (tpusim jobs --help)\n", argv[i]), 2;
    }
    if (!tpu || !cmd || !*cmd) return fprintf(stderr, "tpusim jobs create: --tpu NAME and --command CMD are required\n"), 2;
    tn_err e = {0};
    tn_job j = {0};
    char url[320];
    if (tn_resolve(tpu, url, sizeof url, &e)) return jobs_fail(&e, "create");
    tn_registry *r = NULL;
    snprintf(j.tpu, sizeof j.tpu, "%s", tpu);
    snprintf(j.url, sizeof j.url, "%s", url);
    j.command = strdup(cmd);
    if (tn_registry_open(NULL, &r, &e) || jobs_prepare(r, &j, workdir, data, model, &e)) {
        tn_job_clear(&j);
        tn_registry_close(r);
        return jobs_fail(&e, "create");
    }
    char home[1024];
    snprintf(home, sizeof home, "%s", tn_registry_home(r));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {   /* the supervisor: its own session, no terminal, survives this command */
        setsid();
        signal(SIGTERM, SIG_IGN);
        signal(SIGINT, SIG_IGN);
        signal(SIGHUP, SIG_IGN);
        int null = open("/dev/null", O_RDWR);
        if (null >= 0) dup2(null, 0), dup2(null, 1), dup2(null, 2);
        jobs_supervise(home, j.id);
    }
    printf("%lld\n", (long long)j.id);
    fflush(stdout);
    fprintf(stderr, "tpusim jobs: job %lld on %s (%s): %s\n", (long long)j.id, tpu, url, cmd);
    int64_t id = j.id;
    tn_job_clear(&j);
    int rc = pid < 0 ? 1 : wait ? jobs_follow(r, id, 1) : 0;
    tn_registry_close(r);
    return rc;
}

static void jobs_print(tn_job *v, int n, int json)
{
    double now = tn_wall();
    if (json) printf("[");
    else printf("%-5s %-16s %-10s %5s %-20s %9s  %s\n", "ID", "TPU", "STATE", "EXIT", "CREATED", "DURATION", "COMMAND");
    for (int i = 0; i < n; i++) {
        tn_job *j = &v[i];
        char when[32];
        time_t t = (time_t)j->created;
        strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
        double dur = j->started > 0 ? (j->ended > 0 ? j->ended : now) - j->started : 0;
        if (json)
            printf("%s{\"id\": %lld, \"tpu\": \"%s\", \"state\": \"%s\", \"exit_code\": %d, \"created\": %.3f, \"duration_s\": %.3f}",
                   i ? ", " : "", (long long)j->id, j->tpu, j->state, j->exit_code, j->created, dur);
        else {
            char code[16] = "-";
            if (jobs_terminal(j->state) && strcmp(j->state, "LOST")) snprintf(code, sizeof code, "%d", j->exit_code);
            printf("%-5lld %-16s %-10s %5s %-20s %8.1fs  %s\n", (long long)j->id, j->tpu, j->state, code, when, dur,
                   j->command ? j->command : "");
        }
    }
    if (json) printf("]\n");
}

static int jobs_list(int argc, char **argv)
{
    int json = argc > 2 && !strcmp(argv[2], "--json");
    tn_err e = {0};
    tn_registry *r = NULL;
    tn_job *v = NULL;
    int n = 0;
    if (tn_registry_open(NULL, &r, &e) || tn_job_list(r, &v, &n, &e)) {
        tn_registry_close(r);
        return jobs_fail(&e, "list");
    }
    for (int i = 0; i < n; i++) jobs_check_alive(r, &v[i]);
    jobs_print(v, n, json);
    for (int i = 0; i < n; i++) tn_job_clear(&v[i]);
    free(v);
    tn_registry_close(r);
    return 0;
}

/* Prints the log; with follow, until the job ends (polling the database). Exit: the job's, once it ended. */
static int jobs_follow(tn_registry *r, int64_t id, int follow)
{
    tn_err e = {0};
    int64_t last = 0;
    for (;;) {
        tn_job j;
        if (tn_job_get(r, id, &j, &e)) return jobs_fail(&e, "logs");
        jobs_check_alive(r, &j);
        int done = jobs_terminal(j.state), code = j.exit_code;
        tn_job_clear(&j);
        tn_job_log_print(r, id, last, stdout, &last, &e);
        if (!follow) return 0;
        if (done) {
            tn_job_log_print(r, id, last, stdout, &last, &e);   /* lines stored just before the end */
            return code;
        }
        struct timespec ts = {0, 200 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
}

static int jobs_id(int argc, char **argv, int64_t *id)
{
    char *end;
    if (argc < 3) return fprintf(stderr, "tpusim jobs %s: which job? (an ID from tpusim jobs list)\n", argv[1]), 2;
    *id = strtoll(argv[2], &end, 10);
    if (*end || *id <= 0) return fprintf(stderr, "tpusim jobs %s: '%s' is not a job ID\n", argv[1], argv[2]), 2;
    return 0;
}

static int jobs_stop(tn_registry *r, int64_t id)
{
    tn_err e = {0};
    tn_job j;
    if (tn_job_get(r, id, &j, &e)) return jobs_fail(&e, "stop");
    jobs_check_alive(r, &j);
    int rc = 0;
    if (jobs_terminal(j.state)) {
        printf("job %lld already ended (%s)\n", (long long)id, j.state);
    } else {
        snprintf(j.state, sizeof j.state, "STOPPING");
        tn_job_update(r, &j, &e);
        if (j.pid > 0) kill(-j.pid, SIGTERM);   /* the supervisor's group: the command and its children */
        for (int i = 0; i < 100; i++) {   /* up to 10 s for it to end, then SIGKILL */
            tn_job cur;
            int gone = tn_job_get(r, id, &cur, &e), ended = gone || jobs_terminal(cur.state);
            if (!gone) tn_job_clear(&cur);
            if (ended) break;
            if (i == 50 && j.pid > 0) kill(-j.pid, SIGKILL);
            struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        printf("job %lld stopped\n", (long long)id);
    }
    tn_job_clear(&j);
    tn_err_clear(&e);
    return rc;
}

static int jobs_artifacts(tn_registry *r, int64_t id)
{
    tn_err e = {0};
    tn_job j;
    if (tn_job_get(r, id, &j, &e)) return jobs_fail(&e, "artifacts");
    jobs_check_alive(r, &j);
    int rc = 0;
    if (!jobs_terminal(j.state)) {
        fprintf(stderr, "tpusim jobs artifacts: job %lld is %s: its model dir (%s) is copied when it ends\n", (long long)id,
                j.state, j.model_dir);
        rc = 1;
    } else {
        printf("%s\n", j.artifacts_dir);
        int budget = 10000;
        int64_t total = 0;
        jobs_list_tree(j.artifacts_dir, "", 0, &budget, &total);
    }
    tn_job_clear(&j);
    return rc;
}

int cmd_jobs(int argc, char **argv)
{
    if (argc < 2 || cli_is_help(argv[1])) {
        jobs_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "create")) return jobs_create(argc, argv);
    if (!strcmp(argv[1], "list")) return jobs_list(argc, argv);
    int64_t id;
    if (strcmp(argv[1], "logs") && strcmp(argv[1], "stop") && strcmp(argv[1], "artifacts"))
        return fprintf(stderr, "tpusim jobs: unknown action '%s' (create, list, logs, stop, artifacts)\n", argv[1]), 2;
    int rc = jobs_id(argc, argv, &id);
    if (rc) return rc;
    tn_err e = {0};
    tn_registry *r = NULL;
    if (tn_registry_open(NULL, &r, &e)) return jobs_fail(&e, argv[1]);
    if (!strcmp(argv[1], "logs")) {
        int follow = argc > 3 && !strcmp(argv[3], "--follow");
        rc = jobs_follow(r, id, follow);
        if (!follow) rc = rc ? 1 : 0;
    } else if (!strcmp(argv[1], "stop")) {
        rc = jobs_stop(r, id);
    } else {
        rc = jobs_artifacts(r, id);
    }
    tn_registry_close(r);
    return rc;
}
