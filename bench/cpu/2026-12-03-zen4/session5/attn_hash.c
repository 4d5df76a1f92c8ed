/* attn_hash.c — attn_dram.c (bench/cpu/2026-12-02-zen4/) with the shape from the environment
 * (HH KV heads, GG heads a group, DD head dim) and a hash of the bits of the first
 * repetition's verify and dense outputs, to check that two builds form the same numbers:
 *   gcc -O2 -Iinclude -Isrc bench/cpu/2026-12-03-zen4/session5/attn_hash.c OLD/liblocks.a -lm -lpthread -o /tmp/h_old
 *   (the same with NEW/liblocks.a -> /tmp/h_new), then for each shape and length
 *   HH=1 GG=4 DD=256 AB_LAYERS=1 /tmp/h_old 1003 5 2 | grep hash   (and /tmp/h_new)
 * Session 5 compared ffdc3f3 and 08da540 at (1,4,256,1003) (3,3,64,1003) (2,8,64,1003)
 * (3,3,64,1000) (3,3,64,64): equal. */
/*
 * attn_dram.c — the scratch program behind the session's attention figures in
 * bench/RESULTS.md ("Zen 4 (AVX-512 VNNI) machine") and docs/DESIGN.md (kept as it ran;
 * not part of the build). A cache of 30 layers of SmolLM2's shape (3 KV heads, d 64),
 * `len` tokens of random K/V (150 MB at 6,480: out of the 32 MB L3), then:
 *   - "touch-all": every K/V line read in decode order by one thread, prefetching PFD
 *     pages ahead with __builtin_prefetch locality PFH (the prefetcht0 / t1 / t2 sweep);
 *   - dense (locks_attend_prefix) and verify of nq queries (locks_attend_prefix_n) over
 *     the 30 layers, a 3 MB read between layers standing in for the weights, median of 15.
 * AB_LAYERS=1: one layer 30 times (from L3). argv: len nq threads isa (locks_isa).
 * Build (from the repository root, after `cmake --build build`):
 *   gcc -O2 -DPFD=2 -DPFH=2 -Iinclude -Isrc bench/cpu/2026-12-02-zen4/attn_dram.c \
 *       build/liblocks.a -lm -lpthread -o /tmp/attn_dram
 *   /tmp/attn_dram 6480 5 2
 * The in-attention prefetch variants of that session were builds of src/attend.c with
 * -DLOCKS_PREFETCH_AHEAD / -DLOCKS_PREFETCH_HINT, hooks that existed from commit 5cec258
 * to 7389cc6 (they are plain constants since).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "locks.h"
#include "vmath.h"
#ifndef PFD
#define PFD 2
#endif
#ifndef PFH
#define PFH 3
#endif
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e3+t.tv_nsec*1e-6;}
static int cmp(const void*a,const void*b){double x=*(const double*)a,y=*(const double*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  int L=getenv("AB_LAYERS")?atoi(getenv("AB_LAYERS")):30,H=getenv("HH")?atoi(getenv("HH")):3,G=getenv("GG")?atoi(getenv("GG")):3,d=getenv("DD")?atoi(getenv("DD")):64,len=argc>1?atoi(argv[1]):6480,nq=argc>2?atoi(argv[2]):5,reps=15;
  locks_cache_params cp=locks_cache_default_params();
  cp.n_layers=L;cp.n_kv_heads=H;cp.head_dim=d;cp.n_pages=len/16+8;cp.max_seqs=1;cp.n_threads=argc>3?atoi(argv[3]):2; if(argc>4) locks_cpu_set_isa((int)atoi(argv[4]));
  locks_status err; locks_cache*c=locks_cache_init(cp,&err); if(!c){printf("init %d\n",err);return 1;}
  int seq; locks_cache_seq_add(c,&seq); locks_cache_append(c,seq,len);
  size_t n=(size_t)len*H*d; float*k=malloc(n*4),*v=malloc(n*4);
  srand(1); for(size_t i=0;i<n;i++){k[i]=(rand()/(float)RAND_MAX-0.5f)*2+(float)(i%5)*0.3f;v[i]=rand()/(float)RAND_MAX-0.5f;}
  for(int l=0;l<L;l++) if(locks_cache_write(c,seq,l,0,len,k,v)){printf("write\n");return 1;}
  int Hq=H*G; float*q=malloc(sizeof(float)*16*Hq*d),*out=malloc(sizeof(float)*16*Hq*d);
  for(int i=0;i<16*Hq*d;i++) q[i]=rand()/(float)RAND_MAX-0.5f;
  size_t wb=3u<<20; char*w=malloc(wb); memset(w,1,wb); volatile long sink=0;
  double td[64],tv[64];
  for(int r=0;r<reps;r++){
    double t0=now();
    for(int ll=0;ll<30;ll++){ int l=ll%L; if(locks_attend_prefix(c,l,seq,len,q,Hq,out)){printf("dense\n");return 1;}
      long s=0; for(size_t i=0;i<wb;i+=64) s+=w[i]; sink+=s; }
    double t1=now();
    for(int ll=0;ll<30;ll++){ int l=ll%L; if(locks_attend_prefix_n(c,l,seq,len-nq+1,nq,q,Hq,out)){printf("verify\n");return 1;}
      long s=0; for(size_t i=0;i<wb;i+=64) s+=w[i]; sink+=s; }
    double t2=now(); td[r]=t1-t0; tv[r]=t2-t1; if(r==0){ unsigned long hsh=0; for(int i=0;i<nq*Hq*d;i++){unsigned u; memcpy(&u,&out[i],4); hsh=hsh*1000003u+u;} printf("verify hash %lx\n",hsh); locks_attend_prefix(c,0,seq,len,q,Hq,out); hsh=0; for(int i=0;i<Hq*d;i++){unsigned u; memcpy(&u,&out[i],4); hsh=hsh*1000003u+u;} printf("dense hash %lx\n",hsh);}
  }
  { /* touch every K/V line in decode order, 1 thread */
    double best=1e30;
    for(int r=0;r<5;r++){ double t0=now(); long s=0;
      int np=len/16; const int32_t*tab; int32_t npg; tab=locks_cache_block_table(c,seq,&npg);
      for(int l=0;l<L;l++) for(int h=0;h<H;h++) for(int p=0;p<np;p++){
        const char*kp=(const char*)locks_cache_k_page(c,l,tab[p])+(size_t)h*16*d*2;
        const char*vp=(const char*)locks_cache_v_page(c,l,tab[p])+(size_t)h*16*d*2;
        if(PFD&&p+PFD<np){ const char*k2=(const char*)locks_cache_k_page(c,l,tab[p+PFD])+(size_t)h*16*d*2;
          const char*v2=(const char*)locks_cache_v_page(c,l,tab[p+PFD])+(size_t)h*16*d*2;
          for(int o=0;o<16*d*2;o+=64){__builtin_prefetch(k2+o,0,PFH);__builtin_prefetch(v2+o,0,PFH);} }
        for(int o=0;o<16*d*2;o+=64) s+=kp[o]+vp[o]; }
      sink+=s; double t=now()-t0; if(t<best)best=t; }
    printf("touch-all 1 thread: %.2f ms (%.1f GB/s)\n",best,(double)L*H*(len/16)*4096/best/1e6);
  }
  /* the weight-stream stand-in alone */
  double t0=now(); for(int l=0;l<L;l++){long s=0; for(size_t i=0;i<wb;i+=64) s+=w[i]; sink+=s;} double tw=now()-t0;
  qsort(td,reps,8,cmp); qsort(tv,reps,8,cmp);
  printf("len %d: dense %.2f ms, verify(%d) %.2f ms (%.2fx dense) [stand-in %.2f ms]\n",len,td[reps/2],nq,tv[reps/2],tv[reps/2]/td[reps/2],tw);
  return 0;}
