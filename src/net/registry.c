/* registry.c — TPU names and jobs in one SQLite database, $TPUSIM_HOME/registry.db (default ~/.tpusim):
 * `tpusim serve --name NAME` registers NAME -> grpc://HOST:PORT with its slice, state and a heartbeat;
 * `tpusim resolve`, `tpusim list`, the plugin (TPU_NAME) and the Python helper read it. A server that died
 * leaves its entry behind: readers see its heartbeat age and ask its health check, and show it UNHEALTHY.
 * Jobs and their log lines live in the same file, so they survive a restart of the tool. WAL mode and a busy
 * timeout let the server, job supervisors and the CLI use it at once. */
#include "net/net.h"

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

struct tn_registry {
    sqlite3 *db;
    char     home[1024];
};

static const char *tn_schema =
    "CREATE TABLE IF NOT EXISTS tpus(name TEXT PRIMARY KEY, url TEXT NOT NULL, slice TEXT, state TEXT, host TEXT,"
    " pid INTEGER, clients INTEGER, hbm_in_use INTEGER, hbm_total INTEGER, started REAL, heartbeat REAL);"
    "CREATE TABLE IF NOT EXISTS jobs(id INTEGER PRIMARY KEY AUTOINCREMENT, tpu TEXT, url TEXT, command TEXT,"
    " workdir TEXT, data_dir TEXT, model_dir TEXT, artifacts_dir TEXT, state TEXT, pid INTEGER, exit_code INTEGER,"
    " created REAL, started REAL, ended REAL, message TEXT);"
    "CREATE TABLE IF NOT EXISTS job_logs(job INTEGER, seq INTEGER, ts REAL, stream TEXT, line TEXT,"
    " PRIMARY KEY(job, seq));";

static int tn_db_fail(tn_registry *r, tn_err *e, const char *what)
{
    return tn_fail(e, TN_UNAVAILABLE, "the registry %s/registry.db: %s: %s", r->home, what, sqlite3_errmsg(r->db));
}

int tn_registry_open(const char *home, tn_registry **out, tn_err *e)
{
    *out = NULL;
    tn_registry *r = calloc(1, sizeof *r);
    if (!r) return tn_fail(e, TN_RESOURCE_EXHAUSTED, "out of host memory");
    const char *h = home && *home ? home : getenv("TPUSIM_HOME");
    if (h && *h) snprintf(r->home, sizeof r->home, "%s", h);
    else snprintf(r->home, sizeof r->home, "%s/.tpusim", getenv("HOME") ? getenv("HOME") : ".");
    if (tpu_mkdirs(NULL, r->home, 0700)) {
        int rc = tn_fail(e, TN_UNAVAILABLE, "TPUSIM_HOME=%s: cannot create it: %s", r->home, strerror(errno));
        free(r);
        return rc;
    }
    char path[1100];
    snprintf(path, sizeof path, "%s/registry.db", r->home);
    int rc = TN_OK;
    if (sqlite3_open(path, &r->db) != SQLITE_OK) rc = tn_db_fail(r, e, "cannot open it");
    if (!rc) sqlite3_busy_timeout(r->db, 10000);
    if (!rc && sqlite3_exec(r->db, "PRAGMA journal_mode=WAL;", NULL, NULL, NULL) != SQLITE_OK) rc = tn_db_fail(r, e, "WAL mode");
    if (!rc && sqlite3_exec(r->db, tn_schema, NULL, NULL, NULL) != SQLITE_OK) rc = tn_db_fail(r, e, "creating its tables");
    if (rc) {
        tn_registry_close(r);
        return rc;
    }
    *out = r;
    return TN_OK;
}

void tn_registry_close(tn_registry *r)
{
    if (!r) return;
    sqlite3_close(r->db);
    free(r);
}

const char *tn_registry_home(const tn_registry *r) { return r->home; }

/* ---- TPUs ---- */

static void tn_col_text(sqlite3_stmt *st, int i, char *dst, size_t n)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    snprintf(dst, n, "%s", t ? (const char *)t : "");
}

static void tn_row_tpu(sqlite3_stmt *st, tn_tpu_entry *t)
{
    memset(t, 0, sizeof *t);
    tn_col_text(st, 0, t->name, sizeof t->name);
    tn_col_text(st, 1, t->url, sizeof t->url);
    tn_col_text(st, 2, t->slice, sizeof t->slice);
    tn_col_text(st, 3, t->state, sizeof t->state);
    tn_col_text(st, 4, t->host, sizeof t->host);
    t->pid = sqlite3_column_int(st, 5);
    t->clients = sqlite3_column_int(st, 6);
    t->hbm_in_use = sqlite3_column_int64(st, 7);
    t->hbm_total = sqlite3_column_int64(st, 8);
    t->started = sqlite3_column_double(st, 9);
    t->heartbeat = sqlite3_column_double(st, 10);
}

#define TN_TPU_COLS "name, url, slice, state, host, pid, clients, hbm_in_use, hbm_total, started, heartbeat"

int tn_registry_lookup(tn_registry *r, const char *name, tn_tpu_entry *out, tn_err *e)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT " TN_TPU_COLS " FROM tpus WHERE name = ?", -1, &st, NULL) != SQLITE_OK)
        return tn_db_fail(r, e, "lookup");
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) tn_row_tpu(st, out);
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW) return TN_OK;
    if (rc != SQLITE_DONE) return tn_db_fail(r, e, "lookup");
    return tn_fail(e, TN_NOT_FOUND, "no TPU named '%s' in %s/registry.db (tpusim list shows the names; tpusim serve "
                   "--name %s registers one)", name, r->home, name);
}

int tn_registry_list(tn_registry *r, tn_tpu_entry **out, int *n, tn_err *e)
{
    *out = NULL, *n = 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT " TN_TPU_COLS " FROM tpus ORDER BY name", -1, &st, NULL) != SQLITE_OK)
        return tn_db_fail(r, e, "list");
    int cap = 0, rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW && *n < 10000) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            tn_tpu_entry *v = realloc(*out, (size_t)cap * sizeof *v);
            if (!v) break;
            *out = v;
        }
        tn_row_tpu(st, &(*out)[(*n)++]);
    }
    sqlite3_finalize(st);
    return TN_OK;
}

static int tn_put_tpu(tn_registry *r, const tn_tpu_entry *t, tn_err *e)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "INSERT OR REPLACE INTO tpus(" TN_TPU_COLS ") VALUES(?,?,?,?,?,?,?,?,?,?,?)", -1, &st,
                           NULL) != SQLITE_OK)
        return tn_db_fail(r, e, "register");
    sqlite3_bind_text(st, 1, t->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, t->url, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, t->slice, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, t->state, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, t->host, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 6, t->pid);
    sqlite3_bind_int(st, 7, t->clients);
    sqlite3_bind_int64(st, 8, t->hbm_in_use);
    sqlite3_bind_int64(st, 9, t->hbm_total);
    sqlite3_bind_double(st, 10, t->started);
    sqlite3_bind_double(st, 11, t->heartbeat);
    int rc = sqlite3_step(st) == SQLITE_DONE ? TN_OK : tn_db_fail(r, e, "register");
    sqlite3_finalize(st);
    return rc;
}

/* In one write transaction: two servers claiming a name at once are served one after the other. */
int tn_registry_claim(tn_registry *r, const tn_tpu_entry *t, int *replaced, tn_err *e)
{
    if (replaced) *replaced = 0;
    if (sqlite3_exec(r->db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) return tn_db_fail(r, e, "register");
    tn_tpu_entry old;
    tn_err le = {0};
    int rc = TN_OK;
    if (!tn_registry_lookup(r, t->name, &old, &le) && strcmp(old.url, t->url)) {
        if (tn_tpu_healthy(old.url, 2.0, NULL) == TN_OK)
            rc = tn_fail(e, TN_ALREADY_EXISTS, "--name %s: the name is held by the TPU at %s (pid %d on %s), which is "
                         "running; stop it or pick another name", t->name, old.url, old.pid, old.host);
        else if (replaced)
            *replaced = 1;
    }
    tn_err_clear(&le);
    if (!rc) rc = tn_put_tpu(r, t, e);
    sqlite3_exec(r->db, rc ? "ROLLBACK" : "COMMIT", NULL, NULL, NULL);
    return rc;
}

int tn_registry_heartbeat(tn_registry *r, const tn_tpu_entry *t, tn_err *e)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "UPDATE tpus SET state = ?, clients = ?, hbm_in_use = ?, heartbeat = ? WHERE name = ? AND pid = ?",
                           -1, &st, NULL) != SQLITE_OK)
        return tn_db_fail(r, e, "heartbeat");
    sqlite3_bind_text(st, 1, t->state, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 2, t->clients);
    sqlite3_bind_int64(st, 3, t->hbm_in_use);
    sqlite3_bind_double(st, 4, t->heartbeat);
    sqlite3_bind_text(st, 5, t->name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 6, t->pid);
    int rc = sqlite3_step(st) == SQLITE_DONE ? TN_OK : tn_db_fail(r, e, "heartbeat");
    if (!rc && sqlite3_changes(r->db) == 0)   /* another server took the name over while we were silent */
        rc = tn_fail(e, TN_ALREADY_EXISTS, "the name %s now belongs to another server", t->name);
    sqlite3_finalize(st);
    return rc;
}

void tn_registry_release(tn_registry *r, const char *name, int pid)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "DELETE FROM tpus WHERE name = ? AND pid = ?", -1, &st, NULL) != SQLITE_OK) return;
    sqlite3_bind_text(st, 1, name, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 2, pid);
    sqlite3_step(st);
    sqlite3_finalize(st);
}

int tn_tpu_healthy(const char *url, double timeout_s, tn_err *e)
{
    tn_client *c = NULL;
    tn_client_opts o = {.timeout_s = timeout_s};
    tn_err le = {0};
    int rc = tn_client_new(url, &o, &c, e ? e : &le);
    if (!rc) rc = tn_client_health(c, timeout_s, e ? e : &le);
    tn_client_free(c);
    tn_err_clear(&le);
    return rc;
}

const char *tn_tpu_state(const tn_tpu_entry *t, double timeout_s)
{
    return tn_tpu_healthy(t->url, timeout_s, NULL) == TN_OK ? t->state : "UNHEALTHY";
}

int tn_resolve(const char *name, char *url, size_t n, tn_err *e)
{
    tn_registry *r = NULL;
    if (tn_registry_open(NULL, &r, e)) return e->code;
    tn_tpu_entry t;
    int rc = tn_registry_lookup(r, name, &t, e);
    tn_registry_close(r);
    if (rc) return rc;
    tn_err he = {0};
    if (tn_tpu_healthy(t.url, 3.0, &he)) {
        rc = tn_fail(e, TN_UNAVAILABLE, "TPU '%s' is registered at %s but does not answer (last heartbeat %.0f s ago; "
                     "UNHEALTHY: its server is gone or stuck): %s", name, t.url, tn_wall() - t.heartbeat, tn_err_msg(&he));
        tn_err_clear(&he);
        return rc;
    }
    snprintf(url, n, "%s", t.url);
    return TN_OK;
}

/* ---- jobs ---- */

void tn_job_clear(tn_job *j)
{
    free(j->command);
    free(j->workdir);
    free(j->data_dir);
    free(j->model_dir);
    free(j->artifacts_dir);
    free(j->message);
    memset(j, 0, sizeof *j);
}

static char *tn_col_dup(sqlite3_stmt *st, int i)
{
    const unsigned char *t = sqlite3_column_text(st, i);
    return t ? strdup((const char *)t) : NULL;
}

#define TN_JOB_COLS "id, tpu, url, command, workdir, data_dir, model_dir, artifacts_dir, state, pid, exit_code, created, started, ended, message"

static void tn_row_job(sqlite3_stmt *st, tn_job *j)
{
    memset(j, 0, sizeof *j);
    j->id = sqlite3_column_int64(st, 0);
    tn_col_text(st, 1, j->tpu, sizeof j->tpu);
    tn_col_text(st, 2, j->url, sizeof j->url);
    j->command = tn_col_dup(st, 3);
    j->workdir = tn_col_dup(st, 4);
    j->data_dir = tn_col_dup(st, 5);
    j->model_dir = tn_col_dup(st, 6);
    j->artifacts_dir = tn_col_dup(st, 7);
    tn_col_text(st, 8, j->state, sizeof j->state);
    j->pid = sqlite3_column_int(st, 9);
    j->exit_code = sqlite3_column_int(st, 10);
    j->created = sqlite3_column_double(st, 11);
    j->started = sqlite3_column_double(st, 12);
    j->ended = sqlite3_column_double(st, 13);
    j->message = tn_col_dup(st, 14);
}

static void tn_bind_job(sqlite3_stmt *st, const tn_job *j)
{
    sqlite3_bind_text(st, 1, j->tpu, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 2, j->url, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 3, j->command, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, j->workdir, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 5, j->data_dir, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 6, j->model_dir, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 7, j->artifacts_dir, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 8, j->state, -1, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 9, j->pid);
    sqlite3_bind_int(st, 10, j->exit_code);
    sqlite3_bind_double(st, 11, j->created);
    sqlite3_bind_double(st, 12, j->started);
    sqlite3_bind_double(st, 13, j->ended);
    sqlite3_bind_text(st, 14, j->message, -1, SQLITE_TRANSIENT);
}

int tn_job_insert(tn_registry *r, tn_job *j, tn_err *e)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "INSERT INTO jobs(tpu, url, command, workdir, data_dir, model_dir, artifacts_dir, state,"
                           " pid, exit_code, created, started, ended, message) VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                           -1, &st, NULL) != SQLITE_OK)
        return tn_db_fail(r, e, "new job");
    tn_bind_job(st, j);
    int rc = sqlite3_step(st) == SQLITE_DONE ? TN_OK : tn_db_fail(r, e, "new job");
    if (!rc) j->id = sqlite3_last_insert_rowid(r->db);
    sqlite3_finalize(st);
    return rc;
}

int tn_job_update(tn_registry *r, const tn_job *j, tn_err *e)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "UPDATE jobs SET tpu=?, url=?, command=?, workdir=?, data_dir=?, model_dir=?, artifacts_dir=?,"
                           " state=?, pid=?, exit_code=?, created=?, started=?, ended=?, message=? WHERE id = ?", -1, &st,
                           NULL) != SQLITE_OK)
        return tn_db_fail(r, e, "job update");
    tn_bind_job(st, j);
    sqlite3_bind_int64(st, 15, j->id);
    int rc = sqlite3_step(st) == SQLITE_DONE ? TN_OK : tn_db_fail(r, e, "job update");
    sqlite3_finalize(st);
    return rc;
}

int tn_job_get(tn_registry *r, int64_t id, tn_job *out, tn_err *e)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT " TN_JOB_COLS " FROM jobs WHERE id = ?", -1, &st, NULL) != SQLITE_OK)
        return tn_db_fail(r, e, "job");
    sqlite3_bind_int64(st, 1, id);
    int rc = sqlite3_step(st);
    if (rc == SQLITE_ROW) tn_row_job(st, out);
    sqlite3_finalize(st);
    if (rc == SQLITE_ROW) return TN_OK;
    return tn_fail(e, TN_NOT_FOUND, "no job %lld in %s/registry.db (tpusim jobs list shows them)", (long long)id, r->home);
}

int tn_job_list(tn_registry *r, tn_job **out, int *n, tn_err *e)
{
    *out = NULL, *n = 0;
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "SELECT " TN_JOB_COLS " FROM jobs ORDER BY id", -1, &st, NULL) != SQLITE_OK)
        return tn_db_fail(r, e, "jobs");
    int cap = 0;
    while (sqlite3_step(st) == SQLITE_ROW && *n < 100000) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 16;
            tn_job *v = realloc(*out, (size_t)cap * sizeof *v);
            if (!v) break;
            *out = v;
        }
        tn_row_job(st, &(*out)[(*n)++]);
    }
    sqlite3_finalize(st);
    return TN_OK;
}

int tn_job_log_append(tn_registry *r, int64_t id, const char *stream, const char *line, size_t len, tn_err *e)
{
    sqlite3_stmt *st = NULL;
    if (sqlite3_prepare_v2(r->db, "INSERT INTO job_logs(job, seq, ts, stream, line) VALUES(?1, (SELECT COALESCE(MAX(seq), 0) + 1"
                           " FROM job_logs WHERE job = ?1), ?2, ?3, ?4)", -1, &st, NULL) != SQLITE_OK)
        return tn_db_fail(r, e, "job log");
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_double(st, 2, tn_wall());
    sqlite3_bind_text(st, 3, stream, -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(st, 4, line, (int)len, SQLITE_TRANSIENT);
    int rc = sqlite3_step(st) == SQLITE_DONE ? TN_OK : tn_db_fail(r, e, "job log");
    sqlite3_finalize(st);
    return rc;
}

int tn_job_log_print(tn_registry *r, int64_t id, int64_t after, FILE *f, int64_t *last, tn_err *e)
{
    sqlite3_stmt *st = NULL;
    *last = after;
    if (sqlite3_prepare_v2(r->db, "SELECT seq, line FROM job_logs WHERE job = ? AND seq > ? ORDER BY seq", -1, &st, NULL) != SQLITE_OK)
        return tn_db_fail(r, e, "job log");
    sqlite3_bind_int64(st, 1, id);
    sqlite3_bind_int64(st, 2, after);
    while (sqlite3_step(st) == SQLITE_ROW) {
        *last = sqlite3_column_int64(st, 0);
        const unsigned char *t = sqlite3_column_text(st, 1);
        fprintf(f, "%s\n", t ? (const char *)t : "");
    }
    sqlite3_finalize(st);
    fflush(f);
    return TN_OK;
}
