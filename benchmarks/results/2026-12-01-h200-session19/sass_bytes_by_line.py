"""Session 19: bytes of SASS of one kernel by the kernel-level source line they come from (the outermost
"inlined at" of nvdisasm -gi output of a cubin built with -lineinfo). Usage: python3 sass_bytes_by_line.py
file.sass <mangled kernel name part>"""
import re,sys,collections
fn=sys.argv[1]; target=sys.argv[2]
lines=open(fn).read().split('\n')
start=None
for i,l in enumerate(lines):
    if l.startswith('.text.') and target in l: start=i; break
outer=None; inner=None; cnt=collections.Counter(); innerc=collections.Counter(); grp=[]
n=0
for l in lines[start+1:]:
    if l.startswith('.text.'): break
    m=re.match(r'\s*//## File "([^"]+)", line (\d+)(?: inlined at "([^"]+)", line (\d+))?',l)
    if m:
        grp.append(m); continue
    if re.match(r'\s*/\*[0-9a-f]{4,}\*/',l):
        if grp:
            last=grp[-1]; outer=(last.group(1).split('/')[-1], int(last.group(2)))
            first=grp[0]; inner=(first.group(1).split('/')[-1], int(first.group(2)))
            grp=[]
        cnt[outer]+=16; innerc[inner]+=16; n+=16
print('total bytes',n)
top=sorted(cnt.items(),key=lambda x:x[0][1])
for k,v in top:
    if v>=1024: print('%6d %s:%d'%(v,k[0],k[1]))
