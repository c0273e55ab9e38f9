"""Session 19: the first chunk's phase durations (us, between the TL_PHASE stamps: inversion end, phase 3,
chol_z_blocked's end (cz), phase 4, phase 9, unit_lower_inverse (tinv), V waited for (vw), W and Y
stored (wy), phase 11, exit) averaged over the fast and the slow blocks (calls 3+, segment 0 left out).
Usage: python3 tl_fast_slow_phases.py file.csv ..."""
import csv,sys,collections
import numpy as np
for f in sys.argv[1:]:
    rows=list(csv.DictReader(open(f)))
    nseg=int(rows[0]['nseg'])
    cols=['inv','p3','cz','p4','p9','tinv','vw','wy','p11','exit']
    d=collections.defaultdict(list)
    for r in rows:
        if int(r['call'])<3: continue
        blk=int(r['block']); seg=int(r['segment'])
        if seg==0: continue
        v=[float(r[c]) for c in cols]
        d[(blk//nseg, seg)].append(np.diff(v))
    print(f, 'steps:', ' '.join('%s>%s'%(cols[i],cols[i+1]) for i in range(len(cols)-1)))
    tot={k:np.median(np.array(v),axis=0) for k,v in d.items()}
    allt=np.array([t.sum() for t in tot.values()])
    thr=np.median(allt)
    fast=[t for t in tot.values() if t.sum()<thr-1]; slow=[t for t in tot.values() if t.sum()>thr+1]
    if not fast or not slow:
        thr=(allt.min()+allt.max())/2; fast=[t for t in tot.values() if t.sum()<thr]; slow=[t for t in tot.values() if t.sum()>=thr]
    print('  fast n=%d'%len(fast), ' '.join('%5.2f'%x for x in np.mean(fast,axis=0)), ' sum %.2f'%np.mean([t.sum() for t in fast]))
    print('  slow n=%d'%len(slow), ' '.join('%5.2f'%x for x in np.mean(slow,axis=0)), ' sum %.2f'%np.mean([t.sum() for t in slow]))
