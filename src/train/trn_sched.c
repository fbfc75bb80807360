/* trn_sched.c — hyper schedules (docs/step_dir.md section 5; python/tpusim/schedules.py is the reference):
 * computed in double precision, scaled by the linear scaling rule, rounded to f32 once. */
#include "train/train.h"

#include <math.h>

static double trn_anneal(int cos_, double a, double b, double x)
{
    if (cos_) return b + (a - b) / 2.0 * (cos(M_PI * x) + 1.0);
    return (b - a) * x + a;
}

double trn_sched_value(const trn_sched *s, int64_t t, int64_t total)
{
    switch (s->kind) {
    case TRN_SCHED_CONSTANT:
        return s->value;
    case TRN_SCHED_STEP:
        return s->initial * pow(s->gamma, (double)(t / s->step_size));
    default: {
        int64_t T = s->total_steps > 0 ? s->total_steps : total;
        if (T < 2) return NAN;
        double initial = s->max_lr / s->div_factor, final = initial / s->final_div_factor;
        if (t < 0) t = 0;
        if (t > T - 1) t = T - 1;
        /* PyTorch: the warm-up phase ends at pct_start * T - 1, the anneal at T - 1 */
        double w = s->pct_start * (double)T - 1.0;
        if ((double)t <= w && w > 0) return trn_anneal(s->cos, initial, s->max_lr, (double)t / w);
        return trn_anneal(s->cos, s->max_lr, final, ((double)t - w) / ((double)(T - 1) - w));
    }
    }
}

double trn_lr_scale(const trn_sig *s, int R)
{
    if (!s->lr_linear || s->ref_replicas < 1) return 1.0;
    return (double)R / (double)s->ref_replicas;
}

float trn_hyper_value(const trn_sig *s, int h, int64_t t, int64_t total, int R)
{
    double v = trn_sched_value(&s->hyper[h].sched, t, total);
    if (s->hyper[h].scaled) v *= trn_lr_scale(s, R);
    return (float)v;
}
