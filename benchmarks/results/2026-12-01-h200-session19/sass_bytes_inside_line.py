"""Session 19: for the SASS of one kernel-level source line (see sass_bytes_by_line.py), bytes by the
source line `depth` levels in (2: the callee's line). Usage: python3 sass_bytes_inside_line.py file.sass
<kernel> <line> [depth]"""
import re,sys,collections
fn=sys.argv[1]; target=sys.argv[2]; outerline=int(sys.argv[3]); depth=int(sys.argv[4]) if len(sys.argv)>4 else 2
lines=open(fn).read().split('\n')
start=[i for i,l in enumerate(lines) if l.startswith('.text.') and target in l][0]
cnt=collections.Counter(); grp=[]; cur=None
for l in lines[start+1:]:
    if l.startswith('.text.'): break
    m=re.match(r'\s*//## File "([^"]+)", line (\d+)',l)
    if m: grp.append((m.group(1).split('/')[-1],int(m.group(2)))); continue
    if re.match(r'\s*/\*[0-9a-f]{4,}\*/',l):
        if grp: cur=grp; grp=[]
        if cur and cur[-1][1]==outerline:
            # chain: inner ... outer. take element at position -depth
            k=cur[-depth] if len(cur)>=depth else cur[0]
            cnt[k]+=16
for k,v in sorted(cnt.items(),key=lambda x:-x[1])[:25]: print(v,k)
